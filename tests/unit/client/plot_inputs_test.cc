// What mha-client's --plot draws from an answer (client/cli/plot_inputs): the chosen batch row's
// weights per head, the cells that is_causal, key_padding_mask and attn_mask (BOOL true or a
// floating -inf; [T, S] or per head [B*H, T, S]) hide, heads dropped by head_mask, the head
// and query selections, top-k scattered onto zeros, a decode step's weights, the analysis, and
// the refusals naming the flag.
#include "client/cli/plot_inputs.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "test_util.h"

namespace mha::testing {
namespace plot_inputs_test {

using client::cli::ForwardMaps;

// A request of B=2, T=S=4 (E=8, self-attention) with `in`'s masks and selections.
v1::ForwardRequest Request(ForwardInputs in) {
  in.query = at::zeros({2, 4, 8});
  auto r = client::MakeForwardRequest(in, {});
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r.value() : v1::ForwardRequest();
}

// Per-head weights [2, heads, rows, 4]: batch row b, head h, row q, key k holds b*1000 + h*100 +
// q*10 + k, so every cell says where it came from.
client::ForwardResult Answer(int64_t heads, int64_t rows) {
  client::ForwardResult r;
  r.model = "toy";
  r.model_version = "3";
  r.attn_weights = at::zeros({2, heads, rows, 4});
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t q = 0; q < rows; ++q) {
        for (int64_t k = 0; k < 4; ++k)
          r.attn_weights[b][h][q][k] = b * 1000 + h * 100 + q * 10 + k;
      }
    }
  }
  return r;
}

uint8_t Masked(const plot::AttentionMaps& m, int64_t panel, int64_t q, int64_t k) {
  const size_t plane = static_cast<size_t>(m.rows * m.keys);
  const size_t at = m.masked.size() == plane ? 0 : static_cast<size_t>(panel) * plane;
  return m.masked[at + static_cast<size_t>(q * m.keys + k)];
}

TEST(ForwardMaps, TheChosenRowsHeadsWithCausalPaddingAndDroppedHeads) {
  ForwardInputs in;
  in.is_causal = true;
  in.key_padding_mask = at::zeros({2, 4}, at::kBool);
  in.key_padding_mask[1][3] = true;  // batch row 1 pads its last key
  in.head_mask = at::tensor({1.0f, 0.0f, 0.5f});
  auto m = ForwardMaps(Answer(3, 4), Request(in), 1);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->title, "model toy v3: attention weights, batch row 1 of 2");
  EXPECT_EQ(m->panels,
            (std::vector<std::string>{"head 0", "head 1 (head_mask 0)", "head 2 (head_mask 0.5)"}));
  EXPECT_EQ(m->panel_masked, (std::vector<uint8_t>{0, 1, 0}));
  EXPECT_EQ(m->weights[static_cast<size_t>(((2 * 4) + 3) * 4 + 1)], 1000 + 200 + 30 + 1);
  ASSERT_EQ(m->masked.size(), 16u);  // one mask for every panel
  for (int64_t q = 0; q < 4; ++q) {
    for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(Masked(*m, 0, q, k), k > q || k == 3) << q << k;
  }
  EXPECT_EQ(m->masked_legend, "masked position (is_causal, key_padding_mask)");
}

TEST(ForwardMaps, APerHeadFloatAttnMaskMasksEachHeadsOwnCells) {
  ForwardInputs in;
  in.attn_mask = at::zeros({2 * 3, 4, 4});
  in.attn_mask[1 * 3 + 2][0][1] = -INFINITY;  // batch row 1, head 2: query 0 cannot see key 1
  in.attn_mask[1 * 3 + 0][2][2] = -INFINITY;
  in.attn_mask[1 * 3 + 1][2][2] = -INFINITY;
  in.attn_mask[1 * 3 + 2][2][2] = -INFINITY;  // every head hides (2, 2)
  in.attn_mask[1 * 3 + 0][3][0] = -1.0f;      // finite: shifts a logit, hides nothing
  in.weights_selection.heads = {2, 0};
  in.average_attn_weights = false;
  client::ForwardResult answer = Answer(2, 4);
  auto m = ForwardMaps(answer, Request(in), 1);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->panels, (std::vector<std::string>{"head 2", "head 0"}));
  ASSERT_EQ(m->masked.size(), 2u * 16u);
  EXPECT_EQ(Masked(*m, 0, 0, 1), 1);  // head 2
  EXPECT_EQ(Masked(*m, 1, 0, 1), 0);  // head 0
  EXPECT_EQ(Masked(*m, 0, 2, 2), 1);
  EXPECT_EQ(Masked(*m, 1, 2, 2), 1);
  EXPECT_EQ(Masked(*m, 1, 3, 0), 0);
  // Averaged over heads: a cell is masked when every head hides it.
  in.weights_selection.heads.clear();
  in.average_attn_weights = true;
  answer.attn_weights = answer.attn_weights.mean(1);
  auto mean = ForwardMaps(answer, Request(in), 1);
  ASSERT_TRUE(mean.ok()) << mean.status().ToString();
  EXPECT_EQ(mean->panels, (std::vector<std::string>{"mean of the heads"}));
  EXPECT_EQ(Masked(*mean, 0, 2, 2), 1);
  EXPECT_EQ(Masked(*mean, 0, 0, 1), 0);
}

TEST(ForwardMaps, SelectedQueryRowsKeepTheirPositionsUnderCausal) {
  ForwardInputs in;
  in.is_causal = true;
  in.weights_selection.query_begin = 2;
  in.weights_selection.query_end = 4;
  auto m = ForwardMaps(Answer(1, 2), Request(in), 0);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->first_row, 2);
  EXPECT_EQ(m->rows, 2);
  for (int64_t k = 0; k < 4; ++k) {
    EXPECT_EQ(Masked(*m, 0, 0, k), k > 2) << k;  // row 0 is query position 2
    EXPECT_EQ(Masked(*m, 0, 1, k), 0) << k;      // position 3 sees every key
  }
}

TEST(ForwardMaps, TopKIsScatteredOntoZeros) {
  client::ForwardResult r;
  r.model = "toy";
  r.model_version = "1";
  r.topk_values = at::full({2, 4, 1}, 0.75f);
  r.topk_indices = at::tensor({3, 2, 1, 0, 0, 0, 0, 0}, at::kInt).view({2, 4, 1});
  ForwardInputs in;
  in.weights_selection.top_k = 1;
  auto m = ForwardMaps(r, Request(in), 0);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->weights.size(), 16u);
  for (int64_t q = 0; q < 4; ++q) {
    for (int64_t k = 0; k < 4; ++k) {
      EXPECT_EQ(m->weights[static_cast<size_t>(q * 4 + k)], k == 3 - q ? 0.75f : 0.0f);
    }
  }
  EXPECT_TRUE(m->masked.empty());
}

TEST(ForwardMaps, RefusesARowOutsideTheBatchAndAnAnswerWithoutWeights) {
  auto outside = ForwardMaps(Answer(1, 4), Request({}), 2);
  EXPECT_EQ(outside.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(outside.status().message(), "--plot-row: 2 is outside the batch of 2"));
  client::ForwardResult none;
  auto no_weights = ForwardMaps(none, Request({}), 0);
  EXPECT_EQ(no_weights.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(no_weights.status().message(), "-w"));
}

TEST(StepMaps, HeadsDownAndTheCacheAcross) {
  const at::Tensor per_head = at::rand({2, 3, 1, 5});
  auto m = client::cli::StepMaps(per_head, 1, "last step");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->rows, 3);
  EXPECT_EQ(m->keys, 5);
  EXPECT_EQ(m->row_names, (std::vector<std::string>{"h0", "h1", "h2"}));
  EXPECT_EQ(m->weights[7], per_head[1][1][0][2].item<float>());
  auto mean = client::cli::StepMaps(at::rand({2, 1, 5}), 0, "last step");
  ASSERT_TRUE(mean.ok()) << mean.status().ToString();
  EXPECT_EQ(mean->rows, 1);
  EXPECT_EQ(client::cli::StepMaps(at::rand({2, 2, 5}), 0, "").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(client::cli::StepMaps(per_head, 2, "").status().code(), StatusCode::kInvalidArgument);
}

TEST(AnalysisData, TheOutputProjectionsNumbersAndATitleWithTheSizes) {
  v1::ModelAnalysis a;
  a.set_model("toy");
  a.set_model_version("2");
  a.set_num_heads(2);
  a.set_head_dim(4);
  a.set_embed_dim(8);
  v1::ProjectionAnalysis* p = a.mutable_output_projection();
  for (double v : {0.75, 0.25}) p->add_head_importance(v);
  for (double v : {3.0, 2.5}) p->add_head_effective_rank(v);
  for (double v : {1.0, 0.1, 0.1, 1.0}) p->add_head_correlation(v);
  p->set_head_max_rank(4);
  const plot::HeadAnalysisData d = client::cli::AnalysisData(a);
  EXPECT_EQ(d.title, "model toy v2: W^O head analysis (E=8, H=2, head_dim=4)");
  EXPECT_EQ(d.importance, (std::vector<double>{0.75, 0.25}));
  EXPECT_EQ(d.effective_rank, (std::vector<double>{3.0, 2.5}));
  EXPECT_EQ(d.correlation.size(), 4u);
  EXPECT_EQ(d.max_rank, 4);
}

}  // namespace plot_inputs_test
}  // namespace mha::testing
