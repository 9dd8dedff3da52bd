// The options of every scheduler of a model version (work_queue.h and its planners: forwards and
// session steps in dynamic_batcher.h, layer steps in a model kind's own planner): one struct, laid
// over the server's flags by config.json once (BatcherOptionsFor, server_core.h).
#pragma once

#include <cstdint>
#include <functional>

#include "mha/status.h"
#include "server/serving/clock.h"
#include "server/serving/scheduling/blas_policy.h"
#include "server/serving/serving_defaults.h"

namespace mha::serve {

struct BatcherOptions {
  // false: one request per pass (the merging limits below do not apply); true: merged passes.
  bool batching = true;
  int64_t max_batch_rows = 64;  // sum of the requests' B in one pass
  // Padded tokens of one pass (CountTokens); one task may exceed it. Bigger CPU passes fall off a
  // cliff (docs/batching.md); raise it on a GPU.
  int64_t max_batch_tokens = 2048;
  // How long the oldest task may wait for company. 0, as Triton's default: a request is never held
  // back while an instance is free; under load batches form anyway from what queued during the
  // previous pass. A delay > 0 trades latency at low load for fuller batches (1000 us added ~1.5
  // ms to p50 at one call in flight).
  int64_t max_queue_delay_us = 0;
  size_t max_queue_size = 64;  // tasks waiting (not counting those being computed)
  // Worker threads (concurrent passes) for the model. 1: OpenBLAS threads every GEMM itself.
  // Measured on 2 cores: 2 instances raised 64-client small-request throughput ~12% (839 vs 750
  // req/s) but cut B=8,T=128 served throughput to 0.64x in-process (0.89x with 1). Raise it per
  // model (config.json "instances") where passes are small.
  int instances = 1;
  // Answers whose output is bigger are delivered on a completion thread (encoding and gRPC's
  // Finish copy it), so that the worker goes straight on to the next pass; smaller ones inline.
  int completion_threads = 1;
  int64_t inline_completion_max_bytes = 256 << 10;
  // The estimated time (microseconds) of a pass of `padded_tokens` tokens (`session`: a pass of
  // session steps); unset = the batcher's own PassTimeEstimator over its measured passes. Tests
  // inject a fake one; 0 = no estimate (nothing is refused on it).
  std::function<double(bool session, int64_t padded_tokens)> estimate_pass_us;
  // OpenBLAS threads per pass (blas_policy.h): by default all cores for a lone request, 1 under
  // load.
  BlasPolicyOptions blas;
  // Where the batcher reads the time: arrivals, the queue delay, deadlines, queue and compute
  // times. Tests drive it with a FakeClock (server/serving/clock.h) instead of sleeping.
  const ClockSource* clock = &RealClock();
  // Runs each forward pass (a request pass, merged or alone, or a pass of session steps): it must
  // call `pass` once and return its status. Unset (mha-server): the pass runs directly. The test
  // seam of the serving path: tests/service/mha_test_server.cc holds passes at a gate with it.
  std::function<Status(const std::function<Status()>& pass)> pass_hook;
};

}  // namespace mha::serve
