#include "client/bench/stand_in_ffn.h"

#include <cmath>
#include <random>

namespace mha::client {

StandInFfn::StandInFfn(int64_t embed_dim, uint64_t seed)
    : e_(embed_dim), w_(static_cast<size_t>(embed_dim * embed_dim)) {
  std::mt19937_64 rng(seed ^ 0x66666e2d77656967ULL);
  std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(embed_dim)));
  for (float& x : w_) x = normal(rng);
}

void StandInFfn::RmsNorm(const float* in, float* out, int64_t rows) const {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = in + r * e_;
    double sum = 0;
    for (int64_t j = 0; j < e_; ++j) sum += static_cast<double>(x[j]) * x[j];
    const float scale = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(e_) + 1e-6));
    float* y = out + r * e_;
    for (int64_t j = 0; j < e_; ++j) y[j] = x[j] * scale;
  }
}

void StandInFfn::Apply(float* h, int64_t rows) const {
  std::vector<float> x(static_cast<size_t>(rows * e_));
  RmsNorm(h, x.data(), rows);
  // k outermost: each row of W is read once per call and reused by every row (vectorised j loop).
  for (int64_t k = 0; k < e_; ++k) {
    const float* w = w_.data() + k * e_;
    for (int64_t r = 0; r < rows; ++r) {
      const float a = x[static_cast<size_t>(r * e_ + k)];
      float* y = h + r * e_;
      for (int64_t j = 0; j < e_; ++j) y[j] += a * w[j];
    }
  }
}

}  // namespace mha::client
