// The KV cache's encoders and decoders (kv/kv_quant.h, attention/kv_pages.h): an int8 token round
// trips within its stated bound (|x - (q * scale + zero)| <= scale / 2, plus float rounding) on
// plain, outlier, constant and one-signed rows; the per-token CPU encoder and the tensor-op one
// (devices, batched appends) give the same bytes; the paged kernel's decoders give what LibTorch's
// casts give, for every float16 and bfloat16 value and every int8 code.
#include "kv/kv_quant.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "attention/kv_pages.h"

namespace mha {
namespace kv_quant_test {

// Tokens [N, H, D] with the shapes a cache meets: normal rows, rows with outlier channels (x20),
// constant rows (zero spread), all-positive and all-negative rows, tiny and huge magnitudes.
at::Tensor Tokens(int64_t heads, int64_t d) {
  at::manual_seed(7);
  std::vector<at::Tensor> rows;
  rows.push_back(at::randn({64, heads, d}));
  at::Tensor outliers = at::randn({64, heads, d});
  outliers.narrow(2, 3, 2).mul_(20);
  rows.push_back(outliers);
  rows.push_back(at::full({2, heads, d}, 0.375f));
  rows.push_back(at::rand({4, heads, d}) + 5);
  rows.push_back(-at::rand({4, heads, d}) - 5);
  rows.push_back(at::randn({4, heads, d}) * 1e-30);
  rows.push_back(at::randn({4, heads, d}) * 1e30);
  return at::cat(rows, 0);
}

TEST(KvQuantTest, Int8RoundTripIsWithinHalfAScalePerElement) {
  const at::Tensor x = Tokens(4, 64);
  const internal::EncodedKv e = internal::EncodeKv(x, at::kChar);
  ASSERT_EQ(e.codes.scalar_type(), at::kChar);
  ASSERT_EQ(e.scales.sizes(), (std::vector<int64_t>{x.size(0), 4, 2}));
  const at::Tensor back = internal::DecodeKv(e.codes, e.scales, at::kFloat);
  const at::Tensor scale = e.scales.select(-1, 0).unsqueeze(-1);
  const at::Tensor amax = x.abs().amax(-1, true);
  // Half a step, plus the float rounding of q * scale + zero and of the scale itself.
  const float eps = std::numeric_limits<float>::epsilon();
  const at::Tensor bound = scale * (0.5f + 256 * eps) + 4 * eps * amax;
  const at::Tensor err = (x - back).abs();
  EXPECT_TRUE((err <= bound).all().item<bool>())
      << "worst excess " << (err - bound).max().item<float>();
  // The bound is tight: the error reaches near half a step somewhere.
  EXPECT_GT((err / scale.clamp_min(1e-37)).max().item<float>(), 0.45f);
  // Constant rows come back exactly; both ends of every row are representable.
  EXPECT_TRUE(at::equal(back.narrow(0, 128, 2), x.narrow(0, 128, 2)));
  EXPECT_EQ(e.codes.min().item<int>(), -128);
  EXPECT_EQ(e.codes.max().item<int>(), 127);
}

TEST(KvQuantTest, ThePerTokenEncoderGivesTheTensorEncodersBytes) {
  const at::Tensor x = Tokens(3, 40).contiguous();  // D not a multiple of 8
  const int64_t n = x.size(0);
  const internal::EncodedKv e = internal::EncodeKv(x, at::kChar);
  at::Tensor q = at::empty({n, 3, 40}, at::kChar), scales = at::empty({n, 3, 2});
  for (int64_t i = 0; i < n; ++i) {
    internal::QuantizeTokenInt8(x[i].data_ptr<float>(), 3, 40, q[i].data_ptr<int8_t>(),
                                scales[i].data_ptr<float>());
  }
  EXPECT_TRUE(at::equal(q, e.codes));
  EXPECT_TRUE(at::equal(scales, e.scales));
}

TEST(KvQuantTest, HalfAndBFloat16StoresRoundToNearestAndDecodeExactly) {
  const at::Tensor x = Tokens(2, 16);
  for (at::ScalarType t : {at::kBFloat16, at::kHalf}) {
    const internal::EncodedKv e = internal::EncodeKv(x, t);
    EXPECT_FALSE(e.scales.defined());
    EXPECT_TRUE(at::equal(e.codes, x.to(t)));
    EXPECT_TRUE(
        at::equal(internal::DecodeKv(e.codes, e.scales, at::kFloat), x.to(t).to(at::kFloat)));
  }
}

TEST(KvQuantTest, ThePageDecodersMatchLibTorchOnEveryValue) {
  // Every 16-bit pattern (NaNs included: compared as bits after a canonical check).
  at::Tensor bits = at::arange(0, 65536, at::kInt).to(at::kShort);  // wraps to int16 patterns
  const auto* raw = reinterpret_cast<const uint16_t*>(bits.data_ptr<int16_t>());
  std::vector<float> half(65536), bf16(65536);
  internal::DecodeHalf(raw, 65536, half.data());
  internal::DecodeBf16(raw, 65536, bf16.data());
  const at::Tensor want_half = bits.view(at::kHalf).to(at::kFloat);
  const at::Tensor want_bf16 = bits.view(at::kBFloat16).to(at::kFloat);
  for (int64_t i = 0; i < 65536; ++i) {
    const float h = want_half[i].item<float>(), b = want_bf16[i].item<float>();
    ASSERT_TRUE(std::isnan(h) ? std::isnan(half[i])
                              : half[i] == h && std::signbit(half[i]) == std::signbit(h))
        << "float16 bits " << i << ": " << half[i] << " vs " << h;
    ASSERT_TRUE(std::isnan(b) ? std::isnan(bf16[i]) : bf16[i] == b)
        << "bfloat16 bits " << i << ": " << bf16[i] << " vs " << b;
  }
  // int8: every code, 8 at a time and in the tail (D = 259).
  const at::Tensor codes = at::arange(-128, 131, at::kInt).remainder(256).sub(128).to(at::kChar);
  const float sz[2] = {0.037f, -1.25f};
  std::vector<float> out(259);
  internal::DecodeInt8(codes.data_ptr<int8_t>(), sz, 259, out.data());
  const at::Tensor want = internal::DecodeKv(codes.view({1, 259}),
                                             at::tensor({0.037f, -1.25f}).view({1, 2}), at::kFloat);
  for (int64_t i = 0; i < 259; ++i) {
    EXPECT_NEAR(out[i], want[0][i].item<float>(), 1e-6f) << "code " << codes[i].item<int>();
  }
}

}  // namespace kv_quant_test
}  // namespace mha
