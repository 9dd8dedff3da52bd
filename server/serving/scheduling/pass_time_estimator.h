// How long a model's next pass of N padded tokens will take, from the passes it ran (
// item 4: no work for answers nobody will read). An exponentially weighted moving average of the
// measured pass times per power-of-two bucket of padded tokens, forward passes and session-step
// passes apart. The estimate leans low, so that a request is never refused on a guess: a bucket
// without measurements borrows the nearest larger bucket's time scaled down linearly by tokens
// (a pass has fixed costs, so this is below the real time), else the nearest smaller bucket's time
// unscaled (more tokens never take less); 0 while nothing was measured. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>

namespace mha::serve {

class PassTimeEstimator {
 public:
  static constexpr double kAlpha = 0.2;  // weight of the newest pass

  void Record(bool session, int64_t padded_tokens, double micros);
  double EstimateUs(bool session, int64_t padded_tokens) const;

 private:
  static constexpr int kBuckets = 40;
  static int Bucket(int64_t tokens);
  struct Slot {
    double us = 0, tokens = 0;  // EWMAs; us == 0: nothing measured
  };
  mutable std::mutex mu_;
  Slot slots_[2][kBuckets];
};

}  // namespace mha::serve
