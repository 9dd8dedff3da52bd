// The KServe v2 REST endpoint under load: 100 keep-alive connections sending inference requests
// while 16 sockets trickle half-sent requests, and /v2/health/ready (a fresh connection per
// probe, as kubelet probes) answers every time within 1 s. Loops are bounded (a fixed number of
// requests per connection, of probes, of trickled bytes); the trickling is pacing, not
// synchronisation: nothing waits on it.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "rest_test_util.h"
#include "service_test_util.h"

namespace mha::testing {
namespace rest_load_test {

constexpr int kLoadConnections = 100;
constexpr int kRequestsPerConnection = 8;
constexpr int kSlowSockets = 16;
constexpr int kProbes = 20;

// Opens a socket and sends a request header promising a body it then trickles a byte at a time
// (one every 100 ms, `bytes` bytes), then closes it.
void Trickle(int port, int bytes) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return;
  const std::string head =
      "POST /v2/models/self_basic/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{";
  (void)!send(fd, head.data(), head.size(), MSG_NOSIGNAL);
  for (int i = 0; i < bytes; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (send(fd, " ", 1, MSG_NOSIGNAL) != 1) break;
  }
  close(fd);
}

struct ProbeResult {
  int sent = 0, ok = 0;
  double slowest_s = 0;
};

// GET /v2/health/ready on a fresh connection each time: at least kProbes, and on until `done`
// (bounded: at most 1000).
template <typename Done>
ProbeResult Probe(int port, Done done) {
  ProbeResult r;
  for (; r.sent < 1000 && (r.sent < kProbes || !done()); ++r.sent) {
    httplib::Client probe("127.0.0.1", port);
    probe.set_connection_timeout(5, 0);
    probe.set_read_timeout(5, 0);
    const auto begin = std::chrono::steady_clock::now();
    auto res = probe.Get("/v2/health/ready");
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    r.slowest_s = std::max(r.slowest_s, s);
    if (res && res->status == 200) ++r.ok;
  }
  return r;
}

TEST(RestLoad, ReadinessAnswersWithinOneSecondUnderLoadAndSlowClients) {
  ModelRepositoryDir repository({"self_basic"});
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--model-repository", repository.path(), "--log-level", "warn"}));
  const int port = server.http_port();
  ASSERT_GT(port, 0);
  nlohmann::json body = {{"inputs", nlohmann::json::array()}};
  std::string unused;
  AddRestInput("query", at::randn({1, 4, 16}), TensorForm::kFlat, &body, &unused);
  const std::string request = body.dump();

  std::vector<std::thread> slow;
  for (int i = 0; i < kSlowSockets; ++i) slow.emplace_back(Trickle, port, 40);  // ~4 s each
  std::atomic<int> started{0}, answered{0}, refused{0}, failed{0};
  std::vector<std::thread> load;
  for (int i = 0; i < kLoadConnections; ++i) {
    load.emplace_back([&] {
      httplib::Client client("127.0.0.1", port);
      client.set_keep_alive(true);
      client.set_read_timeout(60, 0);
      started.fetch_add(1);
      for (int r = 0; r < kRequestsPerConnection; ++r) {
        auto res = client.Post("/v2/models/self_basic/infer", request, "application/json");
        if (res && res->status == 200) {
          answered.fetch_add(1);
        } else if (res && res->status == 429) {
          refused.fetch_add(1);  // queue full: a refusal, not a failure
        } else {
          failed.fetch_add(1);
          ADD_FAILURE() << "no answer: "
                        << (res ? "HTTP " + std::to_string(res->status)
                                : httplib::to_string(res.error()));
        }
      }
    });
  }
  while (started.load() < kLoadConnections) std::this_thread::yield();
  const ProbeResult probes = Probe(port, [&] {
    return answered + refused + failed >= kLoadConnections * kRequestsPerConnection;
  });
  for (auto& t : load) t.join();
  for (auto& t : slow) t.join();
  EXPECT_EQ(probes.ok, probes.sent);
  EXPECT_LT(probes.slowest_s, 1.0) << "slowest /v2/health/ready under load";
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(answered.load() + refused.load(), kLoadConnections * kRequestsPerConnection);
  EXPECT_GT(answered.load(), 0);
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

}  // namespace rest_load_test
}  // namespace mha::testing
