// A KServe v2 REST load generator for bench/run_all.py's rest row: C concurrent keep-alive
// connections (cpp-httplib's client), each sending the same [B, T, E] FP32 query in the binary
// tensor extension with binary_data_output for D seconds; prints requests/s and p50/p90/p99
// latency in the words of `mha-client bench` (--json: one object with bench's keys). Not a test.
//   rest_load PORT MODEL B T E CONCURRENCY SECONDS [--json]
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "client/bench/latency_stats.h"

// `n` standard-normal float32 values as bytes.
std::string RandomFloats(long n) {
  std::vector<float> values(static_cast<size_t>(n));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (float& v : values) v = normal(rng);
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

int main(int argc, char** argv) {
  const bool json = argc == 9 && std::string(argv[8]) == "--json";
  if (argc != 8 && !json) {
    std::fprintf(stderr, "usage: rest_load PORT MODEL B T E CONCURRENCY SECONDS [--json]\n");
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const std::string model = argv[2];
  const long b = std::atol(argv[3]), t = std::atol(argv[4]), e = std::atol(argv[5]);
  const int concurrency = std::atoi(argv[6]);
  const double seconds = std::atof(argv[7]);
  const std::string header =
      "{\"inputs\":[{\"name\":\"query\",\"datatype\":\"FP32\",\"shape\":[" + std::to_string(b) +
      "," + std::to_string(t) + "," + std::to_string(e) +
      "],\"parameters\":{\"binary_data_size\":" + std::to_string(b * t * e * 4) +
      "}}],\"parameters\":{\"binary_data_output\":true}}";
  const std::string body = header + RandomFloats(b * t * e);
  const httplib::Headers headers = {
      {"Inference-Header-Content-Length", std::to_string(header.size())}};
  const std::string path = "/v2/models/" + model + "/infer";
  std::mutex mu;
  std::vector<double> latencies_us;
  std::atomic<long> failed{0};
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::vector<std::thread> threads;
  for (int c = 0; c < concurrency; ++c) {
    threads.emplace_back([&] {
      httplib::Client client("127.0.0.1", port);
      client.set_keep_alive(true);
      client.set_tcp_nodelay(true);  // header and body are two writes: no Nagle delay between
      client.set_read_timeout(60, 0);
      std::vector<double> mine;
      while (std::chrono::steady_clock::now() < end) {
        const auto begin = std::chrono::steady_clock::now();
        auto res = client.Post(path.c_str(), headers, body, "application/octet-stream");
        const double us =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - begin)
                .count();
        if (res && res->status == 200) {
          mine.push_back(us);
        } else {
          failed.fetch_add(1);
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      latencies_us.insert(latencies_us.end(), mine.begin(), mine.end());
    });
  }
  for (auto& th : threads) th.join();
  const mha::client::LatencyStats l = mha::client::SummarizeLatencies(std::move(latencies_us));
  const double rps = static_cast<double>(l.count) / seconds;
  if (json) {
    const nlohmann::json j = {{"ok", l.count},
                              {"errors", failed.load()},
                              {"seconds", seconds},
                              {"throughput_rps", rps},
                              {"latency_us", mha::client::LatencyJson(l)}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "rest binary B=%ld T=%ld c=%d: %lld ok, %ld failed, %.1f req/s, p50 %.3f ms, p90 %.3f ms, "
        "p99 %.3f ms\n",
        b, t, concurrency, static_cast<long long>(l.count), failed.load(), rps, l.p50_us / 1e3,
        l.p90_us / 1e3, l.p99_us / 1e3);
  }
  return failed.load() == 0 ? 0 : 1;
}
