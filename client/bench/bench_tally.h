// What both load loops of `mha-client bench` (closed and open) record per answered call, and the
// report made from it: counts and codes, client latency percentiles, and the server's own
// queue/compute split read from each response's queue_us / compute_us.
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "client/bench/bench_runner.h"

namespace mha::client {

// queue_us and compute_us of a serialized ForwardResponse, reading nothing else: the tensors
// are skipped in place (no copy), which keeps the load generator light on a shared box.
bool ReadTimings(grpc::ByteBuffer* buffer, int64_t* queue_us, int64_t* compute_us);
// The same from a serialized inference.ModelInferResponse (its queue_us / compute_us parameters).
bool ReadOipTimings(grpc::ByteBuffer* buffer, int64_t* queue_us, int64_t* compute_us);

class BenchTally {
 public:
  // `oip`: the responses are inference.ModelInferResponse, else mha.v1 ForwardResponse.
  explicit BenchTally(bool oip = false) : oip_(oip) {}
  // The timed run starts now: answers are timed from here (BenchReport::sample_done_s).
  void Start() { start_ = std::chrono::steady_clock::now(); }
  // One finished call; `response` is null for GetModel pings. Thread-safe.
  void Record(const grpc::Status& status, double latency_us, grpc::ByteBuffer* response);
  BenchReport Finish(double seconds);

 private:
  const bool oip_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::mutex mu_;
  BenchReport report_;
  std::vector<double> latencies_, done_s_, queue_us_, compute_us_;
};

}  // namespace mha::client
