// In-process baseline for `mha-client bench`: the same forward pass run by MhaModel::Forward in
// this process, `threads` closed loops, no server in between (for served/in-process ratios).
#pragma once

#include <memory>
#include <string>

#include "client/bench/bench_runner.h"
#include "mha/model.h"

namespace mha::client {

struct LocalBenchOptions {
  int threads = 1;           // concurrent Forward loops (like server workers)
  int intra_op_threads = 1;  // ATen threads, as the server's --intra-op-threads
  double duration_s = 10.0;
  int64_t requests = 0;  // total; 0 = run for duration_s
  int64_t warmup = 4;
};

// A model of the given shape with seeded random weights (the cost does not depend on values),
// on `device` ("cpu", "cuda", "cuda:N", "auto") in `dtype` ("float32", "float16", "bfloat16"),
// as the server's --device/--dtype place a model: host inputs then travel as they do there.
StatusOr<std::unique_ptr<MhaModel>> MakeLocalModel(int64_t embed_dim, int64_t num_heads,
                                                   int64_t kdim, int64_t vdim,
                                                   const std::string& device = "cpu",
                                                   const std::string& dtype = "float32");

// Latency = one Forward call; server_* fields stay 0.
BenchReport RunLocalBench(const MhaModel& model, const ForwardInputs& inputs,
                          const LocalBenchOptions& options);

}  // namespace mha::client
