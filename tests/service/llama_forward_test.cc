// A Llama model folder served by a real mha-server beside a one-layer model (docs/afd.md): its
// metadata, the stateless Forward of any layer equal to PyTorch's fixture and to the in-process
// core (<= 1e-5 fp32), the fields it refuses by name, and its sessions (batch 1, max_tokens capped
// at the model's positions, client-chosen ids with x-session-id).
#include <ATen/ATen.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "afd_test_util.h"
#include "mha/llama_engine.h"
#include "mha/tensor_adapter.h"

namespace mha::testing {
namespace {

class LlamaServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new AfdServer();
    ASSERT_TRUE(server_->Start({}));
  }
  static void TearDownTestSuite() {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->server.Stop(), 0) << server_->server.log();
    }
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    client_ = server_->Client();
  }
  v1::ForwardRequest Request(const std::string& model, const at::Tensor& query, int64_t layer) {
    v1::ForwardRequest r;
    r.set_model(model);
    r.set_layer(layer);
    *r.mutable_query() = Wire(query);
    return r;
  }

  static AfdServer* server_;
  std::unique_ptr<client::AttentionClient> client_;
};
AfdServer* LlamaServer::server_ = nullptr;

TEST_F(LlamaServer, ModelsSayWhatTheyAre) {
  auto llama = client_->GetModel("llama");
  ASSERT_TRUE(llama.ok()) << llama.status().ToString();
  EXPECT_EQ(llama->architecture(), "llama");
  EXPECT_EQ(llama->state(), v1::READY);
  EXPECT_EQ(llama->num_layers(), 4);
  EXPECT_EQ(llama->embed_dim(), 32);
  EXPECT_EQ(llama->num_heads(), 4);
  EXPECT_EQ(llama->num_key_value_heads(), 2);
  EXPECT_EQ(llama->head_dim(), 8);
  EXPECT_EQ(llama->max_positions(), 128);
  EXPECT_EQ(llama->kv_bytes_per_token_per_layer(), 2 * 2 * 8 * 4);
  EXPECT_EQ(llama->layout(), "llama");
  auto mha = client_->GetModel("mha");
  ASSERT_TRUE(mha.ok());
  EXPECT_EQ(mha->architecture(), "multihead_attention");
  auto list = client_->ListModels();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->models_size(), 3);
}

TEST_F(LlamaServer, StatelessForwardOfEveryLayerEqualsPyTorchAndTheCore) {
  const LlamaCase c = LoadLlamaCase("gqa_ratio4");
  LlamaLoadOptions options;
  options.path = c.dir;
  options.device = "cpu";
  auto local = LoadLlamaModel(options);
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  for (int64_t layer : {0, 1}) {
    auto answer = client_->ForwardRaw(Request("gqa", c.Io("input"), layer));
    ASSERT_TRUE(answer.ok()) << answer.status().ToString();
    EXPECT_EQ(answer->model(), "gqa");
    const at::Tensor out = FromWire(answer->output());
    EXPECT_TRUE(TensorsNear(out, c.Io("output." + std::to_string(layer)), kFp32Tolerance))
        << "layer " << layer;
    auto in_process =
        LlamaForward(*local->stack, layer, ToHost(c.Io("input")), ElementType::kFloat32);
    ASSERT_TRUE(in_process.ok());
    EXPECT_TRUE(TensorsNear(out, ToTensor(*in_process), kFp32Tolerance)) << "layer " << layer;
  }
  v1::ForwardRequest half = Request("gqa", c.Io("input"), 1);
  half.set_output_dtype(v1::BFLOAT16);
  auto bf16 = client_->ForwardRaw(half);
  ASSERT_TRUE(bf16.ok()) << bf16.status().ToString();
  EXPECT_EQ(bf16->output().dtype(), v1::BFLOAT16);
}

TEST_F(LlamaServer, StatelessForwardRefusesWhatALlamaModelHasNot) {
  const at::Tensor q = at::randn({1, 3, 64});
  auto refused = [&](v1::ForwardRequest r) { return client_->ForwardRaw(r).status(); };
  Status s = refused(Request("gqa", q, 2));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "layer: 2 out of range: model 'gqa' has 2 layers (0 .. 1)"))
      << s.message();
  v1::ForwardRequest weights = Request("gqa", q, 0);
  weights.set_need_weights(true);
  EXPECT_TRUE(Contains(refused(weights).message(), "need_weights: not available on a Llama model"));
  v1::ForwardRequest kpm = Request("gqa", q, 0);
  *kpm.mutable_key_padding_mask() = WireBytes(v1::BOOL, 1, {1, 3});
  EXPECT_TRUE(Contains(refused(kpm).message(), "key_padding_mask: not available"));
  v1::ForwardRequest top_k = Request("gqa", q, 0);
  top_k.set_need_weights(true);
  top_k.set_weights_top_k(2);
  EXPECT_TRUE(Contains(refused(top_k).message(), "need_weights"));
  v1::ForwardRequest stats = Request("gqa", q, 0);
  stats.set_head_stats(true);
  EXPECT_TRUE(Contains(refused(stats).message(), "head_stats: head options are not available"));
  EXPECT_TRUE(Contains(refused(Request("gqa", at::randn({1, 3, 32}), 0)).message(),
                       "query: expected floating [B >= 1, T >= 1, 64]"));
  EXPECT_TRUE(Contains(refused(Request("mha", at::randn({1, 3, 32}), 1)).message(),
                       "layer: 1 but model 'mha' is one attention layer"));
  auto fine = client_->ForwardRaw(Request("mha", at::randn({1, 3, 32}), 0));
  EXPECT_TRUE(fine.ok()) << fine.status().ToString();
}

TEST_F(LlamaServer, SessionsAreStacksOfOneSequence) {
  v1::OpenSessionRequest two;
  two.set_model("llama");
  two.set_batch_size(2);
  auto refused = client_->OpenSession(two);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(refused.status().message(), "batch_size: a Llama model's session"));
  v1::OpenSessionRequest open;
  open.set_model("llama");
  open.set_session_id("ffn-7:a.b");  // client-chosen: sent as x-session-id too
  auto opened = client_->OpenSession(open);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(opened->session_id(), "ffn-7:a.b");
  EXPECT_EQ(opened->max_tokens(), 128);  // min(--max-sequence-length 512, 128 positions)
  EXPECT_EQ(opened->batch_size(), 1);
  EXPECT_EQ(opened->kv_blocks(), 4);  // one per layer
  EXPECT_EQ(opened->kv_block_tokens(), 4);
  EXPECT_EQ(client_->OpenSession(open).status().code(), StatusCode::kAlreadyExists);
  v1::ForwardRequest step = Request("", at::randn({1, 1, 32}), 0);
  step.set_session_id("ffn-7:a.b");
  EXPECT_TRUE(Contains(client_->ForwardRaw(step).status().message(),
                       "does not offer session steps in Forward calls"));
  v1::OpenSessionRequest few;
  few.set_model("llama");
  few.set_max_tokens(9);
  auto small = client_->OpenSession(few);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->max_tokens(), 9);
  auto closed = client_->CloseSession("ffn-7:a.b");
  ASSERT_TRUE(closed.ok()) << closed.status().ToString();
  EXPECT_EQ(closed->kv_blocks(), 4);
  EXPECT_TRUE(client_->CloseSession(small->session_id()).ok());
  EXPECT_EQ(client_->CloseSession("ffn-7:a.b").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace mha::testing
