#include "local_bench.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>
#include <vector>

#include "mha/runtime.h"

namespace mha::client {

StatusOr<std::unique_ptr<MhaModel>> MakeLocalModel(int64_t e, int64_t h, int64_t kdim, int64_t vdim,
                                                   const std::string& device,
                                                   const std::string& dtype) {
  auto parsed_dtype = ParseDType(dtype);
  if (!parsed_dtype.ok()) return parsed_dtype.status();
  MhaOptions o;
  o.embed_dim = e;
  o.num_heads = h;
  o.kdim = kdim;
  o.vdim = vdim;
  o.device = device;
  o.dtype = *parsed_dtype;
  at::manual_seed(0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(e));
  MhaWeights w;
  w.q_weight = at::randn({e, e}) * scale;
  w.k_weight = at::randn({e, o.key_dim()}) * scale;
  w.v_weight = at::randn({e, o.value_dim()}) * scale;
  w.out_weight = at::randn({e, e}) * scale;
  w.q_bias = at::zeros({e});
  w.k_bias = at::zeros({e});
  w.v_bias = at::zeros({e});
  w.out_bias = at::zeros({e});
  return MhaModel::Create(o, w);
}

BenchReport RunLocalBench(const MhaModel& model, const ForwardInputs& inputs,
                          const LocalBenchOptions& options) {
  using Clock = std::chrono::steady_clock;
  BenchReport report;
  if (const Status threads = ConfigureThreads({options.intra_op_threads, 1}); !threads.ok()) {
    report.errors = 1;
    report.first_error = threads.ToString();
    return report;
  }
  for (int64_t i = 0; i < options.warmup; ++i) {
    ForwardOutputs out;
    (void)model.Forward(inputs, &out);
  }
  std::mutex mu;
  std::vector<double> latencies;
  std::atomic<int64_t> issued{0};
  const auto start = Clock::now();
  const auto end =
      start + std::chrono::microseconds(static_cast<int64_t>(options.duration_s * 1e6));
  std::vector<std::thread> threads;
  for (int t = 0; t < std::max(1, options.threads); ++t) {
    threads.emplace_back([&] {
      std::vector<double> mine;
      for (;;) {
        if (options.requests > 0 ? issued.fetch_add(1) >= options.requests : Clock::now() >= end) {
          break;
        }
        ForwardOutputs out;
        const auto t0 = Clock::now();
        const Status s = model.Forward(inputs, &out);
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        std::lock_guard<std::mutex> lock(mu);
        if (s.ok()) {
          ++report.ok;
          mine.push_back(us);
        } else {
          ++report.errors;
          if (report.first_error.empty()) report.first_error = s.ToString();
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      latencies.insert(latencies.end(), mine.begin(), mine.end());
    });
  }
  for (auto& th : threads) th.join();
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  report.throughput = report.seconds > 0 ? report.ok / report.seconds : 0;
  report.latency = SummarizeLatencies(std::move(latencies));
  report.server_compute = report.latency;  // in process, the whole call is the compute
  return report;
}

}  // namespace mha::client
