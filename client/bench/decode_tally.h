// What mha-client decode's runs share (decode_bench.cc, decode_branch.cc): random queries as wire
// bytes and the tally of every session's step latencies and errors.
#pragma once

#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <vector>

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

struct Tally {
  std::mutex mu;
  std::vector<double> latencies;
  int64_t errors = 0;
  std::string first_error;
  int64_t kv_blocks = 0, kv_block_tokens = 0, cached_tokens = 0;
  int64_t resumes = 0, resyncs = 0, replayed_tokens = 0;
  std::vector<double> replay_ms;
  void Error(const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    if (errors++ == 0) first_error = s.ToString();
  }
};

}  // namespace mha::client
