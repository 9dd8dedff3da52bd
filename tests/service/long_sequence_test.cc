// A long sequence through a real mha-server (docs/core.md "Blocked attention"): causal
// self-attention at T = 8192 on E=64, H=8 under --max-work-bytes 256 MiB. The estimate before
// blocked attention charged the whole scores (3 * H * T^2 * 4 bytes = 6.4 GB) and refused it;
// now the CPU pass holds one block of rows at a time and the estimate counts that. The answer's
// rows are checked against softmax(q k^T / sqrt(D)) V computed here, row by row, from the
// fixture's weights; averaged weights for the same pass (a whole [T, T] copy) are still refused.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "service_test_util.h"

namespace mha::testing {
namespace long_sequence_test {

constexpr int64_t kT = 8192;

class LongSequenceServer : public SharedServerTest<LongSequenceServer> {
 public:
  static SharedServerSpec Spec() {
    return {{"larger_e64"},
            "",
            {"--default-model", "larger_e64", "--max-sequence-length", std::to_string(kT),
             "--max-work-bytes", std::to_string(int64_t{256} << 20), "--max-response-bytes",
             std::to_string(int64_t{1} << 30)}};
  }
};

// Output row `row` of causal self-attention over x [1, T, E], straight from the weights.
at::Tensor ReferenceRow(const MhaModel& model, const at::Tensor& x, int64_t row) {
  const MhaWeights& w = model.weights();
  const int64_t h = model.options().num_heads, e = model.options().embed_dim, d = e / h;
  const at::Tensor seen = x[0].narrow(0, 0, row + 1);  // [row + 1, E]: keys 0..row
  const at::Tensor q = at::linear(x[0][row], w.q_weight, w.q_bias).view({h, 1, d});
  const at::Tensor k = at::linear(seen, w.k_weight, w.k_bias).view({row + 1, h, d}).transpose(0, 1);
  const at::Tensor v = at::linear(seen, w.v_weight, w.v_bias).view({row + 1, h, d}).transpose(0, 1);
  const at::Tensor probs = at::softmax(at::matmul(q, k.transpose(1, 2)) / std::sqrt(double(d)), -1);
  return at::linear(at::matmul(probs, v).reshape({e}), w.out_weight, w.out_bias);
}

TEST_F(LongSequenceServer, CausalT8192IsServedInBlocksAndMatchesRowByRow) {
  auto c = LoadFixtureCase("larger_e64");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto model = LoadCaseModel(*c);
  ASSERT_NE(model, nullptr);
  at::manual_seed(47);
  ForwardInputs in;
  in.query = at::randn({1, kT, model->options().embed_dim});
  in.is_causal = true;
  client::ForwardOptions options;
  options.model = "larger_e64";
  auto request = client::MakeForwardRequest(in, options);
  ASSERT_TRUE(request.ok()) << request.status().ToString();
  auto response = client_->ForwardRaw(*request);
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  auto result = client::ParseForwardResponse(*response);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_EQ(result->output.sizes(), (at::IntArrayRef{1, kT, 64}));
  // Rows in the first block, across block edges and the last: each against the reference.
  for (int64_t row : {int64_t{0}, int64_t{1}, int64_t{15}, int64_t{16}, int64_t{4097}, kT - 1}) {
    EXPECT_TRUE(TensorsNear(result->output[0][row], ReferenceRow(*model, in.query, row), 1e-5))
        << "row " << row;
  }
}

TEST_F(LongSequenceServer, WeightsOfTheSamePassAreStillRefusedByTheEstimate) {
  v1::ForwardRequest request = SelfAttentionRequest("larger_e64", 1, kT, 64);
  request.set_is_causal(true);
  request.set_need_weights(true);
  request.set_average_attn_weights(true);  // [1, T, T]: a 256 MiB copy, under the response limit
  auto response = client_->ForwardRaw(request);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(response.status().message().find("--max-work-bytes 268435456"), std::string::npos)
      << response.status().message();
}

}  // namespace long_sequence_test
}  // namespace mha::testing
