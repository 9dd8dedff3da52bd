// ServerCore's Llama paths in-process (docs/afd.md): a repository holding two Llama checkpoint
// folders and a one-layer model side by side; stateless Forward of any layer equals PyTorch
// (<= 1e-5), sessions open as stacks (batch 1, max_tokens capped at the model's positions), layer
// step messages equal the fixture's causal forward, and every refusal names its field and numbers.
#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "llama_serving_util.h"
#include "server/serving/server_core.h"

namespace mha::serve {
namespace {

using testing::Contains;

class ServerCoreLlamaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    repo_ = new testing::TempDir();
    namespace fs = std::filesystem;
    fs::create_directory_symlink(testing::FixturePath("llama/stack4_sessions"),
                                 repo_->File("llama"));
    fs::create_directory_symlink(testing::FixturePath("llama/gqa_ratio4"), repo_->File("gqa"));
    fs::create_directory_symlink(testing::FixturePath("cases/decode_causal"), repo_->File("mha"));
    ServerCoreOptions o;
    o.model_repository = repo_->path();
    o.default_model = "mha";
    o.sessions.pool.block_tokens = 4;
    o.limits.max_sequence_length = 512;
    auto core = ServerCore::Create(o);
    ASSERT_TRUE(core.ok()) << core.status().ToString();
    auto loaded = std::make_shared<std::promise<void>>();
    (*core)->StartLoading([loaded] { loaded->set_value(); });
    testing::GetWithin(loaded->get_future(), "the start-up load");
    core_ = std::move(core).value().release();
  }
  static void TearDownTestSuite() {
    delete core_;
    delete repo_;
  }

  static InferenceResponse Forward(InferenceRequest r) {
    auto answer = std::make_shared<std::promise<InferenceResponse>>();
    core_->Infer(std::move(r), [answer](InferenceResponse x) { answer->set_value(std::move(x)); });
    return testing::GetWithin(answer->get_future(), "the forward answer");
  }
  static LayerStepResponse Step(LayerStepRequest r) {
    auto answer = std::make_shared<std::promise<LayerStepResponse>>();
    core_->StepLayer(std::move(r),
                     [answer](LayerStepResponse x) { answer->set_value(std::move(x)); });
    return testing::GetWithin(answer->get_future(), "the layer step answer");
  }
  static std::string Open(const std::string& model, int64_t max_tokens = 0) {
    OpenSessionRequest o;
    o.model = model;
    o.max_tokens = max_tokens;
    auto opened = core_->OpenSession(o);
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    return opened.ok() ? opened->session_id : "";
  }
  static LayerStepRequest Message(int64_t layer, std::vector<LayerStepEntry> entries) {
    LayerStepRequest r;
    r.layer = layer;
    r.entries = std::move(entries);
    return r;
  }

  static testing::TempDir* repo_;
  static ServerCore* core_;
};
testing::TempDir* ServerCoreLlamaTest::repo_ = nullptr;
ServerCore* ServerCoreLlamaTest::core_ = nullptr;

TEST_F(ServerCoreLlamaTest, LlamaFoldersLoadAsStacksBesideOneLayerModels) {
  auto repo = core_->repository();
  auto llama = repo->Resolve("llama");
  ASSERT_TRUE(llama.ok()) << llama.status().ToString();
  ASSERT_NE((*llama)->servable, nullptr);
  EXPECT_STREQ(ArchitectureOf(**llama), "llama");
  EXPECT_EQ((*llama)->stack.num_layers, 4);
  EXPECT_EQ((*llama)->layout, "llama");
  EXPECT_EQ((*llama)->source, "llama");
  EXPECT_EQ((*llama)->info.options.embed_dim, 32);
  auto mha = repo->Resolve("mha");
  ASSERT_TRUE(mha.ok());
  EXPECT_NE((*mha)->servable, nullptr);
  EXPECT_STREQ(ArchitectureOf(**mha), "multihead_attention");
  EXPECT_EQ((*mha)->stack.num_layers, 0);
  auto analysis = core_->Analyze("gqa", "");
  EXPECT_EQ(analysis.status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(ServerCoreLlamaTest, StatelessForwardOfALayerEqualsPyTorch) {
  const testing::LlamaCase c = testing::LoadLlamaCase("gqa_ratio4");
  for (int64_t layer : {0, 1}) {
    InferenceRequest r;
    r.model = "gqa";
    r.layer = layer;
    r.inputs.query = ToHost(c.Io("input"));
    r.is_cancelled = nullptr;
    const InferenceResponse out = Forward(std::move(r));
    ASSERT_TRUE(out.status.ok()) << out.status.ToString();
    EXPECT_TRUE(testing::TensorsNear(ToTensor(out.outputs.output),
                                     c.Io("output." + std::to_string(layer)),
                                     testing::kFp32Tolerance));
  }
}

TEST_F(ServerCoreLlamaTest, StatelessRefusalsNameTheField) {
  const testing::LlamaCase c = testing::LoadLlamaCase("gqa_ratio4");
  auto request = [&](auto edit) {
    InferenceRequest r;
    r.model = "gqa";
    r.inputs.query = ToHost(c.Io("input"));
    edit(r);
    return Forward(std::move(r)).status;
  };
  Status s = request([](InferenceRequest& r) { r.layer = 2; });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(), "layer: 2 out of range: model 'gqa' has 2 layers (0 .. 1)"));
  s = request([](InferenceRequest& r) { r.inputs.need_weights = true; });
  EXPECT_TRUE(Contains(s.message(), "need_weights: not available on a Llama model")) << s.message();
  s = request([&](InferenceRequest& r) { r.inputs.attn_mask = ToHost(at::zeros({9, 9})); });
  EXPECT_TRUE(Contains(s.message(), "attn_mask: not available")) << s.message();
  s = request([](InferenceRequest& r) { r.inputs.weights_selection.top_k = 2; });
  EXPECT_TRUE(Contains(s.message(), "weights_top_k: head options are not available"))
      << s.message();
  s = request([](InferenceRequest& r) { r.inputs.query = ToHost(at::zeros({1, 3, 32})); });
  EXPECT_TRUE(Contains(s.message(), "query: expected floating [B >= 1, T >= 1, 64]"))
      << s.message();
  InferenceRequest one_layer;
  one_layer.model = "mha";
  one_layer.layer = 1;
  one_layer.inputs.query = ToHost(at::zeros({1, 2, 32}));
  s = Forward(std::move(one_layer)).status;
  EXPECT_TRUE(Contains(s.message(), "layer: 1 but model 'mha' is one attention layer"))
      << s.message();
}

TEST_F(ServerCoreLlamaTest, SessionsAreStacksOfOneSequence) {
  OpenSessionRequest two;
  two.model = "llama";
  two.batch_size = 2;
  EXPECT_TRUE(
      Contains(core_->OpenSession(two).status().message(), "batch_size: a Llama model's session"));
  OpenSessionRequest capped;
  capped.model = "llama";  // max_tokens 0 = --max-sequence-length 512, over the 128 positions
  auto opened = core_->OpenSession(capped);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(opened->max_tokens, 128);
  EXPECT_EQ(opened->batch_size, 1);
  EXPECT_EQ(opened->kv_blocks, 4);
  InferenceRequest forward;
  forward.session_id = opened->session_id;
  forward.inputs.query = ToHost(at::zeros({1, 1, 32}));
  EXPECT_TRUE(Contains(Forward(std::move(forward)).status.message(),
                       "does not offer session steps in Forward calls"));
  auto closed = core_->CloseSession(opened->session_id);
  ASSERT_TRUE(closed.ok());
  EXPECT_EQ(closed->kv_blocks, 4);
}

TEST_F(ServerCoreLlamaTest, LayerStepsEqualTheFixturesCausalForward) {
  const testing::LlamaCase c = testing::LoadLlamaCase("stack4_sessions");
  const std::string a = Open("llama"), b = Open("llama");
  at::Tensor xa = c.Io("s0.input").narrow(0, 0, 3), xb = c.Io("s1.input").narrow(0, 0, 2);
  for (int64_t layer = 0; layer < 4; ++layer) {
    const LayerStepResponse r =
        Step(Message(layer, {{a, ToHost(xa.contiguous())}, {b, ToHost(xb.contiguous())}}));
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(r.model, "llama");
    EXPECT_EQ(r.layer_tokens, (std::vector<int64_t>{3, 2}));
    const std::string out = "output." + std::to_string(layer);
    const at::Tensor oa = ToTensor(r.outputs[0]), ob = ToTensor(r.outputs[1]);
    EXPECT_TRUE(
        testing::TensorsNear(oa, c.Io("s0." + out).narrow(0, 0, 3), testing::kFp32Tolerance));
    EXPECT_TRUE(
        testing::TensorsNear(ob, c.Io("s1." + out).narrow(0, 0, 2), testing::kFp32Tolerance));
    xa = xa + oa;
    xb = xb + ob;
  }
  EXPECT_TRUE(core_->CloseSession(a).ok());
  EXPECT_TRUE(core_->CloseSession(b).ok());
}

// A stack session's fork and truncate (docs/afd.md): the fork writes other tokens into the block
// it shares (copied first), the source goes on with its own, and the truncated source replays;
// each branch equals the causal forward of its own sequence: the fixture's PyTorch rows for the
// source, the stateless forward of every layer (itself equal to PyTorch) for the fork.
TEST_F(ServerCoreLlamaTest, ForkAndTruncateOfAStackEqualEachBranchsCausalForward) {
  const testing::LlamaCase c = testing::LoadLlamaCase("stack4_sessions");
  const at::Tensor x = c.Io("s0.input"), y = c.Io("s1.input").narrow(0, 0, 3);
  // Steps `id` with `rows` through every layer (the residual stream between layers).
  auto step_all = [&](const std::string& id, at::Tensor rows) {
    std::vector<at::Tensor> outs;
    for (int64_t layer = 0; layer < 4; ++layer) {
      const LayerStepResponse r = Step(Message(layer, {{id, ToHost(rows.contiguous())}}));
      EXPECT_TRUE(r.status.ok()) << r.status.ToString();
      if (!r.status.ok()) return outs;
      outs.push_back(ToTensor(r.outputs[0]));
      rows = rows + outs.back();
    }
    return outs;
  };
  auto check = [&](const std::vector<at::Tensor>& got, const std::string& s, int64_t begin) {
    ASSERT_EQ(got.size(), 4u);
    for (int64_t l = 0; l < 4; ++l) {
      EXPECT_TRUE(testing::TensorsNear(
          got[l], c.Io(s + ".output." + std::to_string(l)).narrow(0, begin, got[l].size(0)),
          testing::kFp32Tolerance))
          << s << " layer " << l << " from token " << begin;
    }
  };
  const std::string a = Open("llama");
  check(step_all(a, x.narrow(0, 0, 6)), "s0", 0);
  ForkSessionRequest fork;
  fork.session_id = a;
  fork.tokens = 5;
  auto forked = core_->ForkSession(fork);
  ASSERT_TRUE(forked.ok()) << forked.status().ToString();
  EXPECT_EQ(forked->tokens, 5);
  EXPECT_EQ(forked->session.kv_blocks, 8) << "two shared blocks per layer";
  EXPECT_EQ(forked->kv_shared_blocks, 8);
  const std::vector<at::Tensor> branch = step_all(forked->session.session_id, y);
  ASSERT_EQ(branch.size(), 4u);
  at::Tensor seq = at::cat({x.narrow(0, 0, 5), y}).unsqueeze(0);  // the fork's own sequence
  for (int64_t l = 0; l < 4; ++l) {
    InferenceRequest r;
    r.model = "llama";
    r.layer = l;
    r.inputs.query = ToHost(seq.contiguous());
    const InferenceResponse out = Forward(std::move(r));
    ASSERT_TRUE(out.status.ok()) << out.status.ToString();
    const at::Tensor full = ToTensor(out.outputs.output);
    EXPECT_TRUE(testing::TensorsNear(branch[l], full[0].narrow(0, 5, 3), testing::kFp32Tolerance))
        << "fork, layer " << l;
    seq = seq + full;
  }
  check(step_all(a, x.narrow(0, 6, 2)), "s0", 6);  // the source kept its token 5
  auto cut = core_->TruncateSession(a, 3);
  ASSERT_TRUE(cut.ok()) << cut.status().ToString();
  EXPECT_EQ(cut->tokens, 3);
  EXPECT_EQ(cut->kv_blocks, 4);
  check(step_all(a, x.narrow(0, 3, 5)), "s0", 3);
  const Status past = core_->TruncateSession(a, 9).status();
  EXPECT_EQ(past.code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(Contains(past.message(), "tokens: 9 is past the session's length (session '" + a +
                                           "' holds 8 tokens)"));
  fork.tokens = -1;
  EXPECT_EQ(core_->ForkSession(fork).status().code(), StatusCode::kInvalidArgument);
  fork.session_id = "s-unknown";
  EXPECT_EQ(core_->ForkSession(fork).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(core_->CloseSession(a).ok());
  EXPECT_TRUE(core_->CloseSession(forked->session.session_id).ok());
}

TEST_F(ServerCoreLlamaTest, LayerStepRefusalsNameTheFieldAndNumbers) {
  const std::string a = Open("llama"), b = Open("llama"), g = Open("gqa");
  OpenSessionRequest mha_open;
  mha_open.model = "mha";
  auto m = core_->OpenSession(mha_open);
  ASSERT_TRUE(m.ok());
  const HostTensor one = ToHost(at::zeros({1, 32}));
  auto refused = [&](LayerStepRequest r) { return Step(std::move(r)).status; };
  Status s = refused(Message(0, {{a, one}, {"nope", one}}));
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(s.message(), "entries[1].session_id: session 'nope' is unknown"))
      << s.message();
  s = refused(Message(0, {{m->session_id, one}}));
  EXPECT_TRUE(
      Contains(s.message(), "(multihead_attention) does not offer layer steps (LayerSteps)"))
      << s.message();
  s = refused(Message(0, {{a, one}, {g, ToHost(at::zeros({1, 64}))}}));
  EXPECT_TRUE(Contains(s.message(), "entries[1].session_id: session '" + g + "' is on model 'gqa'"))
      << s.message();
  s = refused(Message(0, {{a, one}, {a, one}}));
  EXPECT_TRUE(
      Contains(s.message(), "entries[1].session_id: session '" + a + "' is also entries[0]"));
  s = refused(Message(0, {{a, ToHost(at::zeros({1, 31}))}}));
  EXPECT_TRUE(Contains(s.message(), "entries[0].hidden: expected floating [t >= 1, 32]"))
      << s.message();
  s = refused(Message(4, {{a, one}}));
  EXPECT_TRUE(Contains(s.message(), "layer: 4 out of range: model 'llama' has 4 layers"))
      << s.message();
  s = refused(Message(0, {{a, ToHost(at::zeros({513, 32}))}}));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(
      Contains(s.message(), "entries[0].hidden: 513 new tokens exceed --max-sequence-length 512"));
  ASSERT_TRUE(Step(Message(0, {{a, ToHost(at::zeros({2, 32}))}})).status.ok());
  s = refused(Message(1, {{b, one}, {a, ToHost(at::zeros({3, 32}))}}));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(
      Contains(s.message(), "entries[0]: layer 1 would hold 1 tokens, more than layer 0's 0"))
      << s.message();
  s = refused(Message(1, {{a, ToHost(at::zeros({3, 32}))}}));
  EXPECT_TRUE(
      Contains(s.message(), "entries[0]: layer 1 would hold 3 tokens, more than layer 0's 2"))
      << s.message();
  LayerStepRequest other_model = Message(0, {{a, one}});
  other_model.model = "gqa";
  EXPECT_TRUE(Contains(refused(std::move(other_model)).message(),
                       "model: the sessions are on model 'llama'"));
  s = refused(Message(0, {}));
  EXPECT_TRUE(Contains(s.message(), "entries: a message steps at least one session"));
  for (const std::string& id : {a, b, g, m->session_id}) EXPECT_TRUE(core_->CloseSession(id).ok());
}

// A core of its own with a small --max-work-bytes: a step's estimate counts every row's
// projections and one entry's attention over as many keys as a session may reach (128 here).
TEST_F(ServerCoreLlamaTest, ALayerStepsWorkIsBoundedByMaxWorkBytes) {
  ServerCoreOptions o;
  o.model_repository = repo_->path();
  o.default_model = "mha";
  o.limits.max_work_bytes = 1 << 20;
  auto core = ServerCore::Create(o);
  ASSERT_TRUE(core.ok()) << core.status().ToString();
  auto loaded = std::make_shared<std::promise<void>>();
  (*core)->StartLoading([loaded] { loaded->set_value(); });
  testing::GetWithin(loaded->get_future(), "the start-up load");
  OpenSessionRequest open;
  open.model = "llama";
  auto opened = (*core)->OpenSession(open);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto step = [&](int64_t t) {
    auto answer = std::make_shared<std::promise<LayerStepResponse>>();
    (*core)->StepLayer(Message(0, {{opened->session_id, ToHost(at::zeros({t, 32}))}}),
                       [answer](LayerStepResponse r) { answer->set_value(std::move(r)); });
    return testing::GetWithin(answer->get_future(), "the layer step answer").status;
  };
  // t rows: t * 128 elements (q, k, v, attention, o_proj) + 2 * t * 128 keys * 4 heads (scores,
  // probabilities) + 2 * 128 keys * 16 (one entry's K/V), 4 bytes each: 311296 bytes for t = 64,
  // 1196032 for t = 256 (refused before its max_tokens is looked at).
  EXPECT_TRUE(step(64).ok());
  const Status big = step(256);
  EXPECT_EQ(big.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(big.message(), "bytes of working memory")) << big.message();
  EXPECT_TRUE(Contains(big.message(), "over --max-work-bytes 1048576")) << big.message();
}

}  // namespace
}  // namespace mha::serve
