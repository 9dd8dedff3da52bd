#include "mha/attention_ops.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "test_util.h"

namespace mha {
namespace attention_ops_test {

TEST(AttentionOpsTest, SplitHeadsShapesAndLayout) {
  at::manual_seed(0);
  at::Tensor x = at::randn({2, 4, 8});
  at::Tensor heads = split_heads(x, 2);
  ASSERT_EQ(heads.sizes(), (std::vector<int64_t>{2, 2, 4, 4}));
  // Head 1 of token 3 is features 4..7 of token 3 (the worked example of split_heads).
  EXPECT_TRUE(at::equal(heads[1][1][3], x[1][3].slice(0, 4, 8)));
}

TEST(AttentionOpsTest, CombineHeadsInvertsSplitHeads) {
  at::manual_seed(1);
  for (int64_t h : {1, 2, 4, 8}) {
    at::Tensor x = at::randn({3, 5, 16});
    at::Tensor round_trip = combine_heads(split_heads(x, h));
    EXPECT_TRUE(at::equal(round_trip, x)) << "num_heads=" << h;
    EXPECT_TRUE(round_trip.is_contiguous());
  }
}

// The one-pass layout the CUDA weights path uses (mha::project_qkv_heads) against the named
// steps: linear, split_heads, q * 1/sqrt(D); with and without a bias. Runs on every device the
// tests see (CPU in CI), so the CUDA-only caller's arithmetic is checked without a GPU too.
TEST(AttentionOpsTest, ProjectQkvHeadsEqualsSplitHeadsAndScale) {
  at::manual_seed(3);
  for (const std::string& device : testing::TestDevices()) {
    const auto opts = at::TensorOptions().device(device);
    const int64_t heads = 4, embed = 16;
    at::Tensor x = at::randn({2, 5, embed}, opts), w = at::randn({3 * embed, embed}, opts);
    for (const at::Tensor& b : {at::randn({3 * embed}, opts), at::Tensor()}) {
      SCOPED_TRACE(device + (b.defined() ? " with bias" : " without bias"));
      QkvHeads got = project_qkv_heads(x, w, b, heads);
      std::vector<at::Tensor> qkv = at::linear(x, w, b).chunk(3, -1);
      const double scale = 1.0 / std::sqrt(static_cast<double>(embed / heads));
      EXPECT_TRUE(testing::TensorsNear(got.q_scaled, split_heads(qkv[0], heads) * scale, 1e-5));
      EXPECT_TRUE(testing::TensorsNear(got.k, split_heads(qkv[1], heads), 1e-5));
      EXPECT_TRUE(testing::TensorsNear(got.v, split_heads(qkv[2], heads), 1e-5));
      EXPECT_TRUE(got.q_scaled.is_contiguous() && got.k.is_contiguous() && got.v.is_contiguous());
      // attention_probs with q_scaled gives what it gives the unscaled split.
      EXPECT_TRUE(testing::TensorsNear(attention_probs(got.q_scaled, got.k, at::Tensor(), true),
                                       attention_probs(split_heads(qkv[0], heads), got.k, {}),
                                       1e-5));
    }
  }
}

TEST(AttentionOpsTest, FusedAndExplicitAttentionAgree) {
  at::manual_seed(2);
  at::Tensor q = at::randn({2, 4, 5, 8}), k = at::randn({2, 4, 7, 8}), v = at::randn({2, 4, 7, 8});
  at::Tensor mask = at::randn({2, 1, 1, 7});
  at::Tensor weights;
  at::Tensor explicit_out = attention_with_weights(q, k, v, mask, &weights);
  EXPECT_TRUE(testing::TensorsNear(fused_attention(q, k, v, mask, false), explicit_out, 1e-5));
  EXPECT_TRUE(testing::TensorsNear(weights.sum(-1), at::ones({2, 4, 5}), 1e-5));
}

TEST(AttentionOpsTest, FusedCausalIsTopLeftAligned) {
  at::manual_seed(3);
  at::Tensor q = at::randn({1, 2, 4, 8}), k = at::randn({1, 2, 6, 8}), v = at::randn({1, 2, 6, 8});
  at::Tensor causal =
      at::full({4, 6}, -std::numeric_limits<float>::infinity()).triu(1).view({1, 1, 4, 6});
  at::Tensor weights;
  at::Tensor expected = attention_with_weights(q, k, v, causal, &weights);
  EXPECT_TRUE(testing::TensorsNear(fused_attention(q, k, v, at::Tensor(), true), expected, 1e-5));
  EXPECT_EQ(weights[0][0][0][1].item<float>(), 0.0f);  // row 0 sees key 0 only
}

}  // namespace attention_ops_test
}  // namespace mha
