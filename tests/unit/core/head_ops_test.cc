// The head pieces of mha_core on hand-made tensors: head statistics of known distributions, the
// weights selection (order of heads, rows, averaging, top-k), head_mask, the head-option checks,
// and the analysis of a W^O whose blocks are known (docs/heads.md). PyTorch parity of the same
// through the server: tests/service/heads_test.cc and analysis_test.cc.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "mha/attention_ops.h"
#include "mha/head_analysis.h"
#include "mha/head_selection.h"
#include "test_util.h"

namespace mha::testing {
namespace head_ops_test {

TEST(HeadStatistics, EntropyAndMaxOfKnownDistributions) {
  // [B=1, H=3, T=1, S=4]: uniform, one-hot, half on two keys (two masked keys weigh 0).
  at::Tensor probs =
      at::tensor({0.25f, 0.25f, 0.25f, 0.25f, 0.f, 1.f, 0.f, 0.f, 0.5f, 0.f, 0.5f, 0.f})
          .view({1, 3, 1, 4});
  at::Tensor entropy, top;
  head_statistics(probs, &entropy, &top);
  ASSERT_EQ(entropy.sizes(), (at::IntArrayRef{1, 3, 1}));
  EXPECT_NEAR(entropy[0][0][0].item<double>(), std::log(4.0), 1e-6);
  EXPECT_NEAR(entropy[0][1][0].item<double>(), 0.0, 1e-7);
  EXPECT_NEAR(entropy[0][2][0].item<double>(), std::log(2.0), 1e-6);
  EXPECT_NEAR(top[0][0][0].item<double>(), 0.25, 1e-7);
  EXPECT_NEAR(top[0][1][0].item<double>(), 1.0, 1e-7);
}

TEST(SelectWeights, RowsThenHeadsInTheGivenOrderThenTopK) {
  at::Tensor probs = at::softmax(at::randn({2, 4, 5, 6}), -1);
  WeightsSelection s;
  s.heads = {3, 1};
  s.query_begin = 4;
  ForwardOutputs out;
  SelectWeights(probs, s, /*average=*/false, at::kFloat, &out);
  ASSERT_EQ(out.attn_weights.sizes(), (at::IntArrayRef{2, 2, 1, 6}));
  EXPECT_TRUE(at::equal(out.attn_weights[1][0], probs[1][3].narrow(0, 4, 1)));
  EXPECT_TRUE(at::equal(out.attn_weights[0][1], probs[0][1].narrow(0, 4, 1)));
  s.top_k = 2;
  SelectWeights(probs, s, /*average=*/true, at::kHalf, &out);
  EXPECT_FALSE(out.attn_weights.defined());
  ASSERT_EQ(out.topk_values.sizes(), (at::IntArrayRef{2, 1, 2}));
  EXPECT_EQ(out.topk_values.scalar_type(), at::kHalf);
  EXPECT_EQ(out.topk_indices.scalar_type(), at::kInt);
  const at::Tensor mean = (probs[0][3][4] + probs[0][1][4]) / 2;
  const auto [values, indices] = mean.sort(-1, /*descending=*/true);
  EXPECT_EQ(out.topk_indices[0][0][0].item<int64_t>(), indices[0].item<int64_t>());
  EXPECT_NEAR(out.topk_values[0][0][1].item<double>(), values[1].item<double>(), 1e-3);
}

TEST(HeadMask, ScalesEachHeadOfEachRow) {
  at::Tensor probs = at::ones({2, 3, 1, 2});
  at::Tensor per_row =
      apply_head_mask(probs, at::tensor({1.f, 0.f, 2.f, 0.5f, 1.f, 0.f}).view({2, 3}));
  EXPECT_EQ(per_row[0][2][0][1].item<float>(), 2.f);
  EXPECT_EQ(per_row[1][0][0][0].item<float>(), 0.5f);
  at::Tensor shared = apply_head_mask(probs, at::tensor({0.f, 1.f, 3.f}));
  EXPECT_EQ(shared[1][0][0][1].item<float>(), 0.f);
  EXPECT_EQ(shared[0][2][0][0].item<float>(), 3.f);
}

TEST(CheckHeadOptions, NamesTheFieldAndTheNumbers) {
  MhaOptions o;
  o.embed_dim = 8;
  o.num_heads = 2;
  ForwardInputs in;
  in.query = at::zeros({1, 3, 8});
  in.need_weights = true;
  in.weights_selection.heads = {2};
  EXPECT_TRUE(Contains(CheckHeadOptions(o, in, 3).message(), "weights_heads: head 2"));
  in.weights_selection.heads = {};
  in.weights_selection.top_k = 4;
  EXPECT_TRUE(
      Contains(CheckHeadOptions(o, in, 3).message(), "weights_top_k: 4 must be in [1, S'=3]"));
  in.weights_selection.top_k = 3;
  EXPECT_TRUE(CheckHeadOptions(o, in, 3).ok());
  in.weights_selection.query_begin = 1;
  in.weights_selection.query_end = 1;
  EXPECT_TRUE(Contains(CheckHeadOptions(o, in, 3).message(), "weights_query_end: 1"));
  in.weights_selection = {};
  in.head_mask = at::ones({3});
  EXPECT_TRUE(
      Contains(CheckHeadOptions(o, in, 3).message(), "head_mask: expected shape [H] = [2]"));
}

TEST(AnalyzeHeads, KnownBlocksOfWO) {
  // E=4, H=2, d=2. out_weight = W^O^T: head 0's block of W^O is 2*I (rank 2), head 1's is a
  // rank-1 block of norm 1.
  MhaOptions o;
  o.embed_dim = 4;
  o.num_heads = 2;
  MhaWeights w;
  w.q_weight = w.k_weight = w.v_weight = at::eye(4);
  at::Tensor w_o = at::zeros({4, 4});  // [H*d, E]
  w_o[0][0] = 2;
  w_o[1][1] = 2;
  w_o[2][2] = 1;
  w.out_weight = w_o.t().contiguous();
  auto a = AnalyzeHeads(o, w);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const double n0 = std::sqrt(8.0), n1 = 1.0;
  EXPECT_NEAR(a->output.head_importance[0], n0 / (n0 + n1), 1e-12);
  EXPECT_NEAR(a->output.head_effective_rank[0], 2.0, 1e-6);
  EXPECT_NEAR(a->output.head_effective_rank[1], 1.0, 1e-6);
  EXPECT_EQ(a->output.max_rank, 4);
  EXPECT_EQ(a->output.head_max_rank, 2);
  // Output dimension 2 is fed by head 1 only; dimension 3 by no head (row of zeros stays 0).
  EXPECT_NEAR(a->output_dim_contribution[2 * 2 + 1], 1.0, 1e-6);
  EXPECT_NEAR(a->output_dim_contribution[3 * 2 + 0], 0.0, 1e-12);
  EXPECT_NEAR(a->query.head_importance[0], 0.5, 1e-12);  // W^Q = I: two equal blocks
}

}  // namespace head_ops_test
}  // namespace mha::testing
