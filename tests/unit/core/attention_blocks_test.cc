// Blocked attention (mha/attention_blocks.h, docs/core.md "Blocked attention"): every fixture case
// through a model whose blocks are forced small (1 and 3 query rows, so that every mask kind,
// add_bias_kv / add_zero_attn and the causal diagonal cross block edges) against PyTorch's values
// and against the unblocked pass; the head options (statistics, head_mask, each weights selection)
// blocked vs unblocked; the mask parts block by block; AttentionBlockRows.
#include "mha/attention_blocks.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "mha/decode.h"
#include "mha/kv_cache.h"
#include "mha/loader.h"
#include "mha/model.h"
#include "mha/options.h"
#include "test_util.h"

namespace mha::testing {
namespace attention_blocks_test {

// The case's model on the CPU with blocks of `block_rows` query rows of every batch row and head
// (the probabilities' blocks) for the case's own shape; negative: -block_rows rows of one batch
// row and head (the output-only blocks); 0: unblocked.
std::shared_ptr<MhaModel> BlockedModel(const FixtureCase& c, int64_t block_rows) {
  LoadOptions load;
  load.path = c.weights_path;
  load.device = "cpu";
  auto loaded = LoadWeights(load);
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  if (!loaded.ok()) return nullptr;
  const MhaOptions& o = loaded->options;
  const at::Tensor& q = c.inputs.query;
  const int64_t keys = (c.inputs.key.defined() ? c.inputs.key.size(1) : q.size(1)) +
                       (o.add_bias_kv ? 1 : 0) + (o.add_zero_attn ? 1 : 0);
  loaded->options.attention_block_bytes =
      block_rows >= 0 ? block_rows * q.size(0) * o.num_heads * keys * 4 : -block_rows * keys * 4;
  auto model = MhaModel::Create(loaded->options, std::move(loaded->weights));
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return model.ok() ? std::shared_ptr<MhaModel>(std::move(model).value()) : nullptr;
}

class BlockedFixtureTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(BlockedFixtureTest, MatchesPyTorchAndTheUnblockedPass) {
  const auto& [name, block_rows] = GetParam();
  auto c = LoadFixtureCase(name);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto blocked = BlockedModel(*c, block_rows), whole = BlockedModel(*c, 0);
  ASSERT_NE(blocked, nullptr);
  ASSERT_NE(whole, nullptr);
  for (bool need_weights : {true, false}) {
    ForwardInputs in = c->inputs;
    in.need_weights = need_weights;
    ForwardOutputs out, ref;
    ASSERT_TRUE(blocked->Forward(in, &out).ok());
    ASSERT_TRUE(whole->Forward(in, &ref).ok());
    EXPECT_TRUE(TensorsNear(out.output, c->expected_output, kFp32Tolerance)) << need_weights;
    EXPECT_TRUE(TensorsNear(out.output, ref.output, kFp32Tolerance)) << need_weights;
    ASSERT_EQ(out.attn_weights.defined(), need_weights);
    if (!need_weights) continue;
    EXPECT_TRUE(TensorsNear(out.attn_weights, ref.attn_weights, kFp32Tolerance));
    if (c->inputs.need_weights && c->inputs.average_attn_weights == in.average_attn_weights) {
      EXPECT_TRUE(TensorsNear(out.attn_weights, c->expected_weights, kFp32Tolerance));
    }
  }
}

std::vector<std::tuple<std::string, int>> AllCases() {
  std::vector<std::tuple<std::string, int>> cases;
  for (int rows : {1, 3, -1, -3}) {
    for (const auto& name : FixtureCaseNames()) cases.emplace_back(name, rows);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BlockedFixtureTest, ::testing::ValuesIn(AllCases()),
                         [](const auto& info) {
                           const int rows = std::get<1>(info.param);
                           return std::get<0>(info.param) + (rows > 0 ? "_rows" : "_head_rows") +
                                  std::to_string(std::abs(rows));
                         });

// The head options on a longer query than the fixtures' (11 rows, blocks of 3 and 4): each
// selection's rows, heads, average and top-k, the statistics and head_mask, blocked as unblocked.
TEST(BlockedHeadOptions, SameAsUnblocked) {
  auto c = LoadFixtureCase("causal_kpm");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  at::manual_seed(7);
  ForwardInputs in;
  const int64_t b = c->inputs.query.size(0), e = c->inputs.query.size(2), t = 11;
  in.query = at::randn({b, t, e});
  in.is_causal = true;
  in.key_padding_mask = at::zeros({b, t}, at::kBool);
  in.key_padding_mask.narrow(1, 7, 2).fill_(true);
  in.need_weights = true;
  in.head_stats = true;
  in.head_mask = at::tensor({1.f, 0.f, 0.5f, 2.f});
  auto whole = BlockedModel(*c, 0);
  ASSERT_NE(whole, nullptr);
  struct Variant {
    std::vector<int64_t> heads;
    std::optional<int64_t> begin, end;
    int64_t top_k;
    bool average;
  };
  const std::vector<Variant> variants = {{{}, {}, {}, 0, false},   {{}, {}, {}, 0, true},
                                         {{3, 1}, 2, 9, 0, false}, {{2}, 5, {}, 3, false},
                                         {{}, {}, 4, 2, true},     {{0, 3}, 4, 8, 0, true}};
  for (int rows : {3, 4}) {
    LoadOptions load;
    load.path = c->weights_path;
    auto loaded = LoadWeights(load);
    ASSERT_TRUE(loaded.ok());
    loaded->options.attention_block_bytes = rows * b * loaded->options.num_heads * t * 4;
    auto blocked = MhaModel::Create(loaded->options, std::move(loaded->weights));
    ASSERT_TRUE(blocked.ok());
    for (const Variant& v : variants) {
      in.weights_selection.heads = v.heads;
      in.weights_selection.query_begin = v.begin;
      in.weights_selection.query_end = v.end;
      in.weights_selection.top_k = v.top_k;
      in.average_attn_weights = v.average;
      ForwardOutputs out, ref;
      ASSERT_TRUE((*blocked)->Forward(in, &out).ok());
      ASSERT_TRUE(whole->Forward(in, &ref).ok());
      const std::string what = "rows " + std::to_string(rows) + " top_k " +
                               std::to_string(v.top_k) + " average " + std::to_string(v.average);
      EXPECT_TRUE(TensorsNear(out.output, ref.output, kFp32Tolerance)) << what;
      EXPECT_TRUE(TensorsNear(out.head_entropy, ref.head_entropy, kFp32Tolerance)) << what;
      EXPECT_TRUE(TensorsNear(out.head_max_weight, ref.head_max_weight, kFp32Tolerance)) << what;
      if (v.top_k > 0) {
        EXPECT_TRUE(TensorsNear(out.topk_values, ref.topk_values, kFp32Tolerance)) << what;
        // Ties (row 0 of a causal pass sees one key: its other weights are all 0) may come back
        // in either order, and LibTorch 2.x orders them differently for the blocks: the indices
        // must pick the same values out of the whole pass's full weights.
        ForwardInputs full_in = in;
        full_in.weights_selection.top_k = 0;
        ForwardOutputs full;
        ASSERT_TRUE(whole->Forward(full_in, &full).ok());
        EXPECT_TRUE(TensorsNear(full.attn_weights.gather(-1, out.topk_indices.to(at::kLong)),
                                ref.topk_values, kFp32Tolerance))
            << what;
        EXPECT_FALSE(out.attn_weights.defined()) << what;
      } else {
        EXPECT_TRUE(TensorsNear(out.attn_weights, ref.attn_weights, kFp32Tolerance)) << what;
      }
    }
  }
}

// Session prefills and steps (mha/decode.h) in blocks of one row: a 9-token prefill then a
// 5-token step (bottom-right causal, a padding mask cutting the blocks), output only, weights per
// head and averaged, against the same session on the unblocked model.
TEST(BlockedSessions, PrefillsAndStepsSameAsUnblocked) {
  for (const char* name : {"decode_causal", "decode_causal_bias_kv_zero_attn"}) {
    auto c = LoadFixtureCase(name);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    auto whole = BlockedModel(*c, 0);
    ASSERT_NE(whole, nullptr);
    LoadOptions load;
    load.path = c->weights_path;
    auto loaded = LoadWeights(load);
    ASSERT_TRUE(loaded.ok());
    loaded->options.attention_block_bytes = 1;  // one row per block
    auto one_row = MhaModel::Create(loaded->options, std::move(loaded->weights));
    ASSERT_TRUE(one_row.ok());
    const int64_t e = whole->options().embed_dim;
    at::manual_seed(3);
    const at::Tensor tokens = at::randn({2, 14, e});
    for (int mode : {0, 1, 2}) {  // output only, weights per head, averaged weights
      const bool average = mode == 2;
      std::vector<ForwardOutputs> outs;
      for (const MhaModel* model : {one_row->get(), whole.get()}) {
        auto pool = KvBlockPool::Create(KvPoolOptions{int64_t{1} << 20, 4}, *model);
        ASSERT_TRUE(pool.ok()) << pool.status().ToString();
        KvCache cache(*pool, 2);
        for (auto [begin, n] : {std::pair<int64_t, int64_t>{0, 9}, {9, 5}}) {
          StepInputs in;
          in.query = tokens.narrow(1, begin, n);
          in.need_weights = mode > 0;
          in.average_attn_weights = average;
          in.key_padding_mask = at::zeros({2, begin + n}, at::kBool);
          in.key_padding_mask[1][2] = true;
          ASSERT_TRUE(cache.Reserve(n).ok());
          outs.emplace_back();
          ASSERT_TRUE(DecodeStep(*model, &cache, false, in, &outs.back()).ok());
        }
      }
      for (size_t i = 0; i < 2; ++i) {
        const std::string what = std::string(name) + " step " + std::to_string(i);
        EXPECT_TRUE(TensorsNear(outs[i].output, outs[i + 2].output, kFp32Tolerance)) << what;
        if (mode == 0) continue;
        EXPECT_TRUE(TensorsNear(outs[i].attn_weights, outs[i + 2].attn_weights, kFp32Tolerance))
            << what;
      }
    }
  }
}

// A block's mask is the rows of the whole mask: each term's rows (a [T, S] term and a broadcast
// [B, 1, 1, S] one), the causal diagonal moved by the block's first row, the extra keys' zeros.
TEST(MaskParts, RowsOfABlockAreRowsOfTheWhole) {
  const int64_t t = 7, s = 9;
  MaskParts parts;
  parts.options = at::TensorOptions().dtype(at::kFloat);
  parts.terms.push_back(at::rand({t, s}).gt(0.8).view({1, 1, t, s}));
  parts.terms.push_back(at::randn({2, 1, 1, s}));
  parts.causal_diagonal = s - t + 1;  // bottom-right, as a decoding step's
  parts.extra_keys = 2;
  const at::Tensor whole = parts.Rows(0, t, s);
  ASSERT_EQ(whole.sizes(), (at::IntArrayRef{2, 1, t, s + 2}));
  for (int64_t begin : {0, 2, 5}) {
    const at::Tensor block = parts.Rows(begin, 2, s);
    EXPECT_TRUE(at::equal(block, whole.narrow(2, begin, 2))) << begin;
  }
  EXPECT_TRUE(
      at::equal(parts.Rows(3, 2, 5).narrow(3, 0, 5), whole.narrow(2, 3, 2).narrow(3, 0, 5)));
  EXPECT_FALSE(MaskParts().Rows(0, t, s).defined());
}

// Causal attention whose blocks stop at their last visible key, the output against one block.
TEST(BlockedAttention, CausalBlocksSkipTheKeysNoRowSees) {
  const at::Tensor q = at::randn({2, 3, 10, 4}), k = at::randn({2, 3, 10, 4}),
                   v = at::randn({2, 3, 10, 4});
  MaskParts causal;
  causal.options = q.options();
  causal.causal_diagonal = 1;
  const at::Tensor whole = blocked_attention(q, k, v, causal, false, 0);
  // [2, 3, rows, 10] float32 blocks of the probabilities, [rows, 10] of one head without them.
  for (int64_t rows : {1, 3, 4, 9}) {
    EXPECT_TRUE(TensorsNear(blocked_attention(q, k, v, causal, false, rows * 40), whole, 1e-6))
        << rows;
    const BlockProbs same = [](int64_t, at::Tensor probs) { return probs; };
    EXPECT_TRUE(
        TensorsNear(blocked_attention(q, k, v, causal, false, rows * 240, same), whole, 1e-6))
        << rows;
  }
}

TEST(AttentionBlockRows, RowsWhoseScoresFitTheBudget) {
  // [B=2, H=8, rows, S=1024] float32 is 64 KiB a row.
  EXPECT_EQ(AttentionBlockRows(2, 8, 4096, 1024, 4, int64_t{4} << 20), 64);
  EXPECT_EQ(AttentionBlockRows(2, 8, 4096, 1024, 4, (int64_t{4} << 20) - 1), 63);
  EXPECT_EQ(AttentionBlockRows(2, 8, 32, 1024, 4, int64_t{4} << 20), 32);  // one block
  EXPECT_EQ(AttentionBlockRows(2, 8, 4096, 1024, 4, 0), 4096);             // unblocked
  EXPECT_EQ(AttentionBlockRows(2, 8, 4096, 1024, 4, 1), 1);                // at least one row
  EXPECT_EQ(AttentionBlockRows(int64_t{1} << 40, 1 << 20, 4096, int64_t{1} << 40, 4, 1 << 20), 1);
}

}  // namespace attention_blocks_test
}  // namespace mha::testing
