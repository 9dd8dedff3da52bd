// The packed CPU pass of short plain self-attention (core/src/attention/packed_attention.h) against
// the attention written out in ATen ops here, at sizes that reach every tail of its kernel (head
// dims not a multiple of 8 or 16, T under and over 8, one head, the longest T it takes and the
// first it does not), with and without causality and biases; passes it must not take (masks,
// weights asked) still give the reference output. At one BLAS thread and two: the pass's GEMMs are
// its own panel GEMM's (core/src/attention/panel_gemm.h) at one (at any for B·T ≤ 64), OpenBLAS's
// else; E = 528 reaches the panel GEMM's chunks of K and blocks of rows, and B·T from 1 to 5 past a
// multiple of 6 each of its row tails.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <ostream>
#include <string>

#include "mha/model.h"
#include "mha/runtime.h"
#include "op_counter.h"
#include "test_util.h"

namespace mha {
namespace {

using testing::kFp32Tolerance;
using testing::TensorsNear;

struct Case {
  int64_t batch, t, embed, heads;
  bool causal, bias;
};

std::string Name(const Case& c) {
  return "B" + std::to_string(c.batch) + "_T" + std::to_string(c.t) + "_E" +
         std::to_string(c.embed) + "_H" + std::to_string(c.heads) + (c.causal ? "_causal" : "") +
         (c.bias ? "" : "_nobias");
}
void PrintTo(const Case& c, std::ostream* os) { *os << Name(c); }

std::unique_ptr<MhaModel> RandomModel(const Case& c) {
  at::manual_seed(7);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.embed));
  auto w = [&](std::initializer_list<int64_t> shape) { return at::randn(shape) * scale; };
  MhaOptions options;
  options.embed_dim = c.embed;
  options.num_heads = c.heads;
  options.bias = c.bias;
  options.device = "cpu";
  MhaWeights weights;
  weights.q_weight = w({c.embed, c.embed});
  weights.k_weight = w({c.embed, c.embed});
  weights.v_weight = w({c.embed, c.embed});
  weights.out_weight = w({c.embed, c.embed});
  if (c.bias) {
    weights.q_bias = w({c.embed}), weights.k_bias = w({c.embed});
    weights.v_bias = w({c.embed}), weights.out_bias = w({c.embed});
  }
  auto model = MhaModel::Create(options, std::move(weights));
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return model.ok() ? std::move(*model) : nullptr;
}

// softmax(q k^T / sqrt(D) + mask) v, projected, step by step in ATen; `mask` additive
// [B, 1, 1 or T, T] or undefined.
at::Tensor Reference(const MhaModel& model, const at::Tensor& x, bool causal,
                     const at::Tensor& mask) {
  const MhaWeights& w = model.weights();
  const int64_t b = x.size(0), t = x.size(1), e = x.size(2), h = model.options().num_heads;
  auto heads = [&](const at::Tensor& y) { return y.view({b, t, h, e / h}).transpose(1, 2); };
  const at::Tensor q = heads(at::linear(x, w.q_weight, w.q_bias));
  const at::Tensor k = heads(at::linear(x, w.k_weight, w.k_bias));
  const at::Tensor v = heads(at::linear(x, w.v_weight, w.v_bias));
  at::Tensor scores = at::matmul(q / std::sqrt(static_cast<double>(e / h)), k.transpose(-2, -1));
  if (causal) {
    scores = scores + at::full({t, t}, -std::numeric_limits<float>::infinity()).triu(1);
  }
  if (mask.defined()) scores = scores + mask;
  const at::Tensor mixed = at::matmul(at::softmax(scores, -1), v);
  return at::linear(mixed.transpose(1, 2).reshape({b, t, e}), w.out_weight, w.out_bias);
}

class PackedAttentionTest : public ::testing::TestWithParam<Case> {};

// BLAS threads set for a scope (the packed pass multiplies by its weight panels only at one).
class BlasThreadsScope {
 public:
  explicit BlasThreadsScope(int threads) : before_(BlasThreads()) { SetBlasThreads(threads); }
  ~BlasThreadsScope() {
    if (before_ > 0) SetBlasThreads(before_);
  }

 private:
  int before_;
};

TEST_P(PackedAttentionTest, MatchesTheStepsInAten) {
  const Case c = GetParam();
  auto model = RandomModel(c);
  ASSERT_NE(model, nullptr);
  ForwardInputs in;
  in.query = at::randn({c.batch, c.t, c.embed});
  in.is_causal = c.causal;
  const at::Tensor expected = Reference(*model, in.query, c.causal, at::Tensor());
  for (int threads : {1, 2}) {
    SCOPED_TRACE("BLAS threads " + std::to_string(threads));
    BlasThreadsScope scope(threads);
    if (BlasThreads() != threads) continue;  // no OpenBLAS to set
    ForwardOutputs out;
    testing::OpCounter counter;
    ASSERT_TRUE(model->Forward(in, &out).ok());
    counter.Stop();
    EXPECT_TRUE(TensorsNear(out.output, expected, kFp32Tolerance));
    // The packed pass is its two GEMMs (the panel GEMM at one BLAS thread when E is a multiple of
    // 16, no ATen op) and no other op that computes; a longer T takes the general path (a
    // softmax, its batched GEMMs).
    const int gemms = counter.count("aten::addmm") + counter.count("aten::mm");
    const int softmax = counter.count("aten::softmax");
    if (c.t <= 64) {
      const bool panels = c.embed % 16 == 0 && (threads == 1 || c.batch * c.t <= 64);
      EXPECT_EQ(gemms, panels ? 0 : 2);
      EXPECT_EQ(softmax + counter.count("aten::bmm") + counter.count("aten::mul"), 0);
    } else {
      EXPECT_GT(softmax, 0);
    }
    // The explicit path (weights asked) gives the same output.
    ForwardInputs weights_in = in;
    weights_in.need_weights = true;
    ForwardOutputs with_weights;
    ASSERT_TRUE(model->Forward(weights_in, &with_weights).ok());
    EXPECT_TRUE(TensorsNear(out.output, with_weights.output, kFp32Tolerance));
  }
}

// Cases the packed pass must leave to the general path give the masked reference.
TEST_P(PackedAttentionTest, KeyPaddingMaskTakesTheGeneralPath) {
  const Case c = GetParam();
  if (c.t < 2) GTEST_SKIP() << "a row needs a key left";
  auto model = RandomModel(c);
  ASSERT_NE(model, nullptr);
  ForwardInputs in;
  in.query = at::randn({c.batch, c.t, c.embed});
  in.is_causal = c.causal;
  in.key_padding_mask = at::zeros({c.batch, c.t}, at::kBool);
  in.key_padding_mask.select(1, c.t - 1).fill_(true);  // the last key of every row ignored
  ForwardOutputs out;
  ASSERT_TRUE(model->Forward(in, &out).ok());
  const at::Tensor mask = at::zeros({c.batch, 1, 1, c.t})
                              .masked_fill(in.key_padding_mask.view({c.batch, 1, 1, c.t}),
                                           -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(TensorsNear(out.output, Reference(*model, in.query, c.causal, mask), kFp32Tolerance));
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, PackedAttentionTest,
    ::testing::Values(Case{1, 1, 8, 2, false, true}, Case{3, 7, 12, 3, false, true},
                      Case{3, 7, 12, 3, true, false}, Case{2, 16, 40, 5, true, true},
                      Case{4, 9, 24, 1, false, false}, Case{17, 16, 512, 8, false, true},
                      Case{17, 16, 512, 8, true, true}, Case{2, 64, 64, 4, true, true},
                      Case{2, 65, 64, 4, false, true}, Case{17, 16, 528, 8, true, true},
                      Case{5, 3, 48, 3, false, false}, Case{1, 11, 32, 4, true, true},
                      Case{2, 5, 16, 2, false, true}, Case{7, 1, 64, 4, false, true}),
    [](const auto& info) { return Name(info.param); });

}  // namespace
}  // namespace mha
