// What mha-client decode's runs share (decode_bench.cc, decode_branch.cc): random queries as wire
// bytes and the tally of every session's step latencies and errors.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "client/bench/decode_bench.h"
#include "client/mha_client.h"

namespace mha::client {

inline v1::Tensor RandomQuery(int64_t b, int64_t t, int64_t e, std::mt19937_64* rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> data(static_cast<size_t>(b * t * e));
  for (float& x : data) x = normal(*rng);
  v1::Tensor tensor;
  tensor.set_dtype(v1::FLOAT32);
  for (int64_t d : {b, t, e}) tensor.add_shape(d);
  tensor.set_data(
      std::string(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float)));
  return tensor;
}

// The weights a timed step asks for: need_weights, per head or averaged.
inline void SetWeightsOptions(const DecodeBenchOptions& o, v1::ForwardRequest* step) {
  step->set_need_weights(o.need_weights);
  if (o.need_weights && o.per_head) step->set_average_attn_weights(false);
}

// One thread's answered steps: each one's latency and when it was answered (seconds since the
// run's start), merged into the Tally once the thread is done.
struct StepSamples {
  std::chrono::steady_clock::time_point run_start;
  std::vector<double> latency_us, done_s;
  void Add(std::chrono::steady_clock::time_point sent) {
    const auto now = std::chrono::steady_clock::now();
    latency_us.push_back(std::chrono::duration<double, std::micro>(now - sent).count());
    done_s.push_back(std::chrono::duration<double>(now - run_start).count());
  }
};

struct Tally {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::mutex mu;
  std::vector<double> latencies, done_s;  // every answered step (StepSamples), in merge order
  int64_t errors = 0;
  std::string first_error;
  int64_t kv_blocks = 0, kv_block_tokens = 0, cached_tokens = 0;
  int64_t resumes = 0, resyncs = 0, replayed_tokens = 0;
  std::vector<double> replay_ms;
  // need_weights: the weights of session 0's last answered step, and its tokens after that step.
  v1::Tensor last_step_weights;
  int64_t last_step_tokens = 0;
  // Samples of a thread (run_start set from `start`).
  StepSamples Samples() const { return {start, {}, {}}; }
  // Adds a thread's samples; the caller holds `mu`.
  void MergeLocked(const StepSamples& s) {
    latencies.insert(latencies.end(), s.latency_us.begin(), s.latency_us.end());
    done_s.insert(done_s.end(), s.done_s.begin(), s.done_s.end());
  }
  void Error(const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    if (errors++ == 0) first_error = s.ToString();
  }
};

}  // namespace mha::client
