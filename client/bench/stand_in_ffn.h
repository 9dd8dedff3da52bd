// The FFN side of `mha-client afd` (docs/afd.md), standing in for a model's MLP between the
// attention layers: plain C++, no Torch. One fixed random [E, E] matrix W (normal / sqrt(E), from a
// seed) shared by every layer, and the row norm that keeps the residual stream bounded:
//   layer input  x = rms_norm(h)                    (sent to the attention side)
//   after it     h = h + attention output; h = h + W rms_norm(h)
// Only the shape of the exchange matters to the benchmark, not the model it would be.
#pragma once

#include <cstdint>
#include <vector>

namespace mha::client {

class StandInFfn {
 public:
  StandInFfn(int64_t embed_dim, uint64_t seed);

  int64_t embed_dim() const { return e_; }
  // rows x E values of `in` normalised per row (root mean square 1) into `out` (may be `in`).
  void RmsNorm(const float* in, float* out, int64_t rows) const;
  // h += W rms_norm(h), for `rows` rows of E values.
  void Apply(float* h, int64_t rows) const;

 private:
  int64_t e_;
  std::vector<float> w_;  // [E, E] row-major: out[j] = sum_k in[k] * w_[k * E + j]
};

}  // namespace mha::client
