// ForkSession, TruncateSession and the spill policy of a Llama stack's sessions against a real
// mha-server (docs/afd.md, "Fork, truncate and spill of a stack session"), through LayerSteps:
// the fork writes other tokens into the block it shares, the source goes on with its own, the
// truncated source replays, and sessions spill and come back under a pool of one session's blocks;
// every layer's output equals the fixture's PyTorch rows, or (the fork's own sequence) the
// server's stateless forward of each layer, itself equal to PyTorch (llama_forward_test.cc).
#include <ATen/ATen.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "afd_test_util.h"

namespace mha::testing {
namespace layer_steps_branch_test {

class LayerStepsBranchTest : public ::testing::Test {
 protected:
  // Steps session `id` with `rows` [t, 32] through the 4 layers on `stream` (the residual stream
  // between layers): each layer's output.
  std::vector<at::Tensor> StepAll(client::AttentionClient::LayerStepsRW* stream,
                                  const std::string& id, at::Tensor rows) {
    std::vector<at::Tensor> outs;
    for (int64_t layer = 0; layer < 4; ++layer) {
      v1::LayerStepResponse r;
      if (!stream->Write(StepMessage(id, layer, {id}, {rows})) || !stream->Read(&r)) break;
      EXPECT_FALSE(r.has_error()) << id << " layer " << layer << ": " << r.error().message();
      if (r.has_error()) break;
      outs.push_back(FromWire(r.outputs(0)));
      rows = rows + outs.back();
    }
    return outs;
  }
  // Every layer of `got` equals session `s`'s fixture rows from token `begin`.
  void Check(const std::vector<at::Tensor>& got, const std::string& s, int64_t begin) {
    ASSERT_EQ(got.size(), 4u) << s;
    for (int64_t l = 0; l < 4; ++l) {
      EXPECT_TRUE(TensorsNear(
          got[l], c_.Io(s + ".output." + std::to_string(l)).narrow(0, begin, got[l].size(0)),
          kFp32Tolerance))
          << s << " layer " << l << " from token " << begin;
    }
  }

  const LlamaCase c_ = LoadLlamaCase("stack4_sessions");
  AfdServer server_;
};

TEST_F(LayerStepsBranchTest, ForkAndTruncateOfAStackEqualEachBranchsCausalForward) {
  ASSERT_TRUE(server_.Start({}));
  auto client = server_.Client();
  const at::Tensor x = c_.Io("s0.input"), y = c_.Io("s1.input").narrow(0, 0, 3);
  const std::string a = OpenOn(*client, "llama");
  grpc::ClientContext context;
  auto stream = client->OpenLayerSteps(&context);
  Check(StepAll(stream.get(), a, x.narrow(0, 0, 6)), "s0", 0);
  auto fork = client->ForkSession(a, 5, "a.fork");
  ASSERT_TRUE(fork.ok()) << fork.status().ToString();
  EXPECT_EQ(fork->tokens(), 5);
  EXPECT_EQ(fork->kv_blocks(), 8);
  EXPECT_EQ(fork->kv_shared_blocks(), 8);
  const std::vector<at::Tensor> branch = StepAll(stream.get(), "a.fork", y);
  ASSERT_EQ(branch.size(), 4u);
  at::Tensor seq = at::cat({x.narrow(0, 0, 5), y}).unsqueeze(0);  // the fork's own sequence
  for (int64_t l = 0; l < 4; ++l) {
    v1::ForwardRequest r;
    r.set_model("llama");
    r.set_layer(l);
    *r.mutable_query() = Wire(seq);
    auto out = client->ForwardRaw(r);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    const at::Tensor full = FromWire(out->output());
    EXPECT_TRUE(TensorsNear(branch[l], full[0].narrow(0, 5, 3), kFp32Tolerance)) << "layer " << l;
    seq = seq + full;
  }
  Check(StepAll(stream.get(), a, x.narrow(0, 6, 2)), "s0", 6);  // a kept its own token 5
  auto cut = client->TruncateSession(a, 3);
  ASSERT_TRUE(cut.ok()) << cut.status().ToString();
  EXPECT_EQ(cut->tokens(), 3);
  EXPECT_EQ(cut->kv_blocks(), 4);
  Check(StepAll(stream.get(), a, x.narrow(0, 3, 5)), "s0", 3);
  const Status past = client->TruncateSession(a, 9).status();
  EXPECT_EQ(past.code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(Contains(past.message(), "tokens: 9 is past the session's length"));
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  ASSERT_TRUE(client->CloseSession(a).ok());
  ASSERT_TRUE(client->CloseSession("a.fork").ok());
  EXPECT_EQ(
      ScrapeMetric(server_.metrics_port, "mha_kv_cache_blocks_used{model=\"llama\",version=\"1\"}"),
      0);
}

// Three sessions of 6 tokens (2 blocks of 4 tokens per layer: 8 blocks of 512 bytes) on a pool of
// 8 blocks: each message's session is restored (the least recently used other spilled), exactly.
TEST_F(LayerStepsBranchTest, SpillUnderAPoolOfOneSessionKeepsEveryLayerExact) {
  TempDir spill;
  ASSERT_TRUE(server_.Start({"--kv-cache-bytes", "4096", "--kv-cache-full-policy", "spill",
                             "--kv-spill-dir", spill.path()}));
  auto client = server_.Client();
  const std::vector<std::string> ids = {"s0", "s1", "s2"};
  for (const std::string& id : ids) ASSERT_EQ(OpenOn(*client, "llama", 0, id), id);
  grpc::ClientContext context;
  auto stream = client->OpenLayerSteps(&context);
  for (int64_t p = 0; p < 6; ++p) {
    for (const std::string& id : ids) {
      Check(StepAll(stream.get(), id, c_.Io(id + ".input").narrow(0, p, 1)), id, p);
    }
  }
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_GT(ScrapeMetric(server_.metrics_port, "mha_session_restores_total{model=\"llama\"}"), 0);
  EXPECT_EQ(ScrapeMetric(server_.metrics_port, "mha_session_evictions_total{model=\"llama\"}"), 0);
  EXPECT_EQ(
      ScrapeMetric(server_.metrics_port, "mha_sessions_spilled{model=\"llama\",version=\"1\"}"), 2);
}

}  // namespace layer_steps_branch_test
}  // namespace mha::testing
