// Decoding sessions against a real mha-server (docs/sessions.md), one server for the suite: a
// sequence decoded step by step through OpenSession + Forward(session_id) equals PyTorch's one full
// forward (self- and cross-attention, one token or chunks per step), steps of one session on a
// stream apply in order, and bad ids, closed sessions, bad steps and limits are refused precisely.
// The budget, expiry, restart, unload and batching tests: session_lifetime_test.cc.
#include <ATen/ATen.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <utility>

#include "session_test_util.h"

namespace mha::testing {
namespace sessions_test {
// Decodes the whole fixture sequence in `session` (first chunk, then `step` tokens at a time),
// checking every answer against the reference rows.
void DecodeAndCheck(client::TensorClient& client, const std::string& session, const FixtureCase& c,
                    int64_t first, int64_t step) {
  const bool cross = c.inputs.key.defined();
  const int64_t total = c.inputs.query.size(1);
  for (int64_t p = 0; p < total;) {
    const int64_t n = std::min(total - p, p == 0 ? first : step);
    const int64_t keys = cross ? c.inputs.key.size(1) : p + n;
    auto result = client.Step(session, StepOf(c.inputs, p, n, keys));
    ASSERT_TRUE(result.ok()) << "tokens " << p << ".." << p + n - 1 << ": "
                             << result.status().ToString();
    EXPECT_EQ(result->session_tokens, p + n);
    EXPECT_TRUE(TensorsNear(result->output, c.expected_output.narrow(1, p, n), 1e-5))
        << "output of tokens " << p << ".." << p + n - 1;
    if (c.inputs.need_weights) {
      EXPECT_TRUE(TensorsNear(result->attn_weights,
                              ExpectedWeights(c.expected_weights, p, n, keys, ExtraKeys(c)), 1e-5))
          << "weights of tokens " << p << ".." << p + n - 1;
    }
    p += n;
  }
}

const std::vector<std::string> kCases = {"decode_causal",         "decode_causal_bias_kv_zero_attn",
                                         "causal_mask_kpm",       "cross_attention",
                                         "bias_kv_zero_attn_kpm", "kdim_vdim"};

class SessionServer : public SharedServerTest<SessionServer> {
 public:
  static SharedServerSpec Spec() {
    return {kCases, "", {"--kv-block-tokens", "4", "--instances", "2"}};
  }

 protected:
  std::string Open(const FixtureCase& c, int64_t max_tokens = 0) {
    client::SessionOpenOptions o;
    o.model = c.name;
    o.batch_size = c.inputs.query.size(0);
    o.max_tokens = max_tokens;
    o.key = c.inputs.key;
    o.value = c.inputs.value;
    auto opened = client_->OpenSession(o);
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    if (!opened.ok()) return "";
    EXPECT_EQ(opened->model(), c.name);
    EXPECT_EQ(opened->model_version(), "1");
    EXPECT_EQ(opened->cross_attention(), c.inputs.key.defined());
    EXPECT_EQ(opened->kv_block_tokens(), 4);
    return opened->session_id();
  }
};

struct Chunking {
  std::string fixture;
  int64_t first, step;
};

class SessionParity : public SessionServer, public ::testing::WithParamInterface<Chunking> {};

TEST_P(SessionParity, StepwiseDecodingEqualsOneFullForward) {
  const FixtureCase c = Case(GetParam().fixture);
  const std::string id = Open(c);
  ASSERT_FALSE(id.empty());
  DecodeAndCheck(*client_, id, c, GetParam().first, GetParam().step);
  auto closed = client_->CloseSession(id);
  ASSERT_TRUE(closed.ok()) << closed.status().ToString();
  EXPECT_EQ(closed->tokens(), c.inputs.query.size(1));
}

std::vector<Chunking> Chunkings() {
  std::vector<Chunking> out;
  for (const auto& name : kCases) {
    out.push_back({name, 1, 1});  // one token per step
    out.push_back({name, 3, 2});  // chunked prefill, then chunks
    out.push_back({name, 5, 1});  // chunked prefill, then single tokens
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SessionParity, ::testing::ValuesIn(Chunkings()),
                         [](const auto& info) {
                           return info.param.fixture + "_first" + std::to_string(info.param.first) +
                                  "_step" + std::to_string(info.param.step);
                         });

// A ForwardStream sends up to --stream-window steps before the first answer: the later ones
// wait behind the one in flight and apply in order (any other order would change the numbers).
TEST_F(SessionServer, StepsOfOneSessionOnAStreamApplyInOrder) {
  const FixtureCase c = Case("decode_causal");
  const std::string id = Open(c);
  ASSERT_FALSE(id.empty());
  const int64_t total = c.inputs.query.size(1);
  std::vector<ForwardInputs> steps;
  for (int64_t p = 0; p < total; ++p) steps.push_back(StepOf(c.inputs, p, 1, p + 1));
  client::ForwardOptions options;
  options.session_id = id;
  auto results = client_->ForwardStream(steps, options);
  ASSERT_TRUE(results.ok()) << results.status().ToString();
  ASSERT_EQ(results->size(), static_cast<size_t>(total));
  for (int64_t p = 0; p < total; ++p) {
    EXPECT_EQ((*results)[p].session_tokens, p + 1);
    EXPECT_TRUE(TensorsNear((*results)[p].output, c.expected_output.narrow(1, p, 1), 1e-5))
        << "token " << p;
  }
  EXPECT_TRUE(client_->CloseSession(id).ok());
}

TEST_F(SessionServer, BadIdsClosedSessionsAndBadStepsAreRefusedPrecisely) {
  const FixtureCase c = Case("decode_causal");
  auto unknown = client_->Step("s-0123", StepOf(c.inputs, 0, 1, 1));
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(unknown.status().message(), "session 's-0123' is unknown"));
  EXPECT_EQ(client_->CloseSession("s-0123").status().code(), StatusCode::kNotFound);

  const std::string id = Open(c, /*max_tokens=*/3);
  ASSERT_FALSE(id.empty());
  ForwardInputs wrong_b = StepOf(c.inputs, 0, 1, 1);
  wrong_b.query = at::cat({wrong_b.query, wrong_b.query}, 0);
  auto bad = client_->Step(id, wrong_b);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(bad.status().message(), "query: expected shape [2, T >= 1, 32]"));
  ForwardInputs with_key = StepOf(c.inputs, 0, 1, 1);
  with_key.key = with_key.value = with_key.query;
  EXPECT_TRUE(Contains(client_->Step(id, with_key).status().message(),
                       "a session step carries only its new tokens"));
  client::ForwardOptions other_model;
  other_model.model = "cross_attention";
  auto mismatch = client_->Step(id, StepOf(c.inputs, 0, 1, 1), other_model);
  EXPECT_EQ(mismatch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(mismatch.status().message(), "is on model 'decode_causal' version 1"));
  ForwardInputs bad_mask = StepOf(c.inputs, 0, 2, 2);
  bad_mask.key_padding_mask = at::zeros({2, 1}, at::kBool);
  EXPECT_TRUE(Contains(client_->Step(id, bad_mask).status().message(),
                       "key_padding_mask: expected shape [2, 2] (masks cover 0 cached + 2 new"));
  ForwardInputs top_k = StepOf(c.inputs, 0, 1, 1);
  top_k.need_weights = true;
  top_k.weights_selection.top_k = 1;  // head options are stateless-only: refused, not dropped
  auto heads = client_->Step(id, top_k);
  EXPECT_EQ(heads.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(heads.status().message(), "head options are not available on a session"));

  // Refused steps changed nothing: the sequence still decodes exactly, up to max_tokens.
  auto first = client_->Step(id, StepOf(c.inputs, 0, 2, 2));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(TensorsNear(first->output, c.expected_output.narrow(1, 0, 2), 1e-5));
  auto over = client_->Step(id, StepOf(c.inputs, 2, 2, 4));
  EXPECT_EQ(over.status().code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(
      Contains(over.status().message(), "2 tokens decoded + 2 new exceed its max_tokens 3"));
  auto last = client_->Step(id, StepOf(c.inputs, 2, 1, 3));
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_TRUE(TensorsNear(last->output, c.expected_output.narrow(1, 2, 1), 1e-5));

  auto closed = client_->CloseSession(id);
  ASSERT_TRUE(closed.ok());
  EXPECT_EQ(closed->tokens(), 3);
  EXPECT_EQ(closed->kv_blocks(), 2);  // 3 tokens in one 4-token block per row
  auto after = client_->Step(id, StepOf(c.inputs, 3, 1, 4));
  EXPECT_EQ(after.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(after.status().message(), "was closed (CloseSession)"));
  EXPECT_TRUE(Contains(client_->CloseSession(id).status().message(), "was closed"));
}

// Client-chosen ids (docs/scale-out.md): the id a proxy hashes exists before the session does.
TEST_F(SessionServer, ClientChosenIdsAndTheAffinityHeader) {
  const FixtureCase c = Case("decode_causal");
  v1::OpenSessionRequest open;
  open.set_model(c.name);
  open.set_batch_size(c.inputs.query.size(0));
  open.set_session_id("app:user-7.turn_1");
  auto opened = client_->OpenSession(open);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(opened->session_id(), "app:user-7.turn_1");
  auto again = client_->OpenSession(open);
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(Contains(again.status().message(), "'app:user-7.turn_1' is open on this server"));
  for (const auto& [id, why] : std::vector<std::pair<std::string, std::string>>{
           {"has space",
            "session_id: character 3 is 0x20; a session id is made of [A-Za-z0-9._:-]"},
           {std::string(129, 'a'), "session_id: 129 characters, a session id is at most 128"}}) {
    v1::OpenSessionRequest bad = open;
    bad.set_session_id(id);
    auto refused = client_->OpenSession(bad);
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << id;
    EXPECT_EQ(refused.status().message(), why);
  }

  // The header a proxy routes by must name the session the message names.
  auto stub = v1::AttentionService::NewStub(
      grpc::CreateChannel(shared_->server->target(), grpc::InsecureChannelCredentials()));
  auto step = client::MakeForwardRequest(StepOf(c.inputs, 0, 1, 1), {});
  ASSERT_TRUE(step.ok());
  step->set_session_id("app:user-7.turn_1");
  grpc::ClientContext context;
  context.AddMetadata("x-session-id", "app:user-8");
  v1::ForwardResponse response;
  const grpc::Status disagree = stub->Forward(&context, *step, &response);
  EXPECT_EQ(disagree.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(disagree.error_message(),
            "x-session-id: the header names session 'app:user-8' but session_id is "
            "'app:user-7.turn_1' (they must agree: a proxy routes by the header)");
  grpc::ClientContext agree_context;
  agree_context.AddMetadata("x-session-id", "app:user-7.turn_1");
  const grpc::Status agree = stub->Forward(&agree_context, *step, &response);
  ASSERT_TRUE(agree.ok()) << agree.error_message();
  EXPECT_EQ(response.session_tokens(), 1);  // the refused step changed nothing

  // Closed, the id may be opened again (a client resuming a session it lost).
  ASSERT_TRUE(client_->CloseSession("app:user-7.turn_1").ok());
  auto reopened = client_->OpenSession(open);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_TRUE(client_->CloseSession("app:user-7.turn_1").ok());
}

TEST_F(SessionServer, OpenSessionChecksModelLimitsAndKeyValue) {
  client::SessionOpenOptions o;
  o.model = "nope";
  EXPECT_EQ(client_->OpenSession(o).status().code(), StatusCode::kNotFound);
  o.model = "decode_causal";
  o.batch_size = 65;
  auto big = client_->OpenSession(o);
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(big.status().message(), "batch_size: 65 exceeds --max-batch-size 64"));
  o.batch_size = 1;
  o.max_tokens = 5000;
  EXPECT_TRUE(Contains(client_->OpenSession(o).status().message(),
                       "max_tokens: 5000 exceeds --max-sequence-length 4096"));
  o.max_tokens = 0;
  o.model = "kdim_vdim";
  EXPECT_TRUE(
      Contains(client_->OpenSession(o).status().message(), "only cross-attention sessions"));
  o.key = at::randn({1, 6, 11});
  o.value = at::randn({1, 6, 20});
  auto wrong = client_->OpenSession(o);
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(wrong.status().message(), "key: expected floating [1, S, 12]"));
}

}  // namespace sessions_test
}  // namespace mha::testing
