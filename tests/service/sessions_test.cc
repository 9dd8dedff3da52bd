// Decoding sessions against a real mha-server (docs/sessions.md): a sequence decoded step by step
// through OpenSession + Forward(session_id) equals PyTorch's one full forward (self- and
// cross-attention, one token or chunks per step), steps of one session apply in order, the KV
// cache budget refuses or evicts, idle sessions expire, closed / unknown / restarted sessions get
// NOT_FOUND saying why, and the blocks come back (mha_kv_cache_blocks_used).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <thread>

#include "lifecycle_util.h"
#include "service_test_util.h"

namespace mha::testing {
namespace {

using namespace std::chrono_literals;

FixtureCase Case(const std::string& name) {
  auto c = LoadFixtureCase(name);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? c.value() : FixtureCase();
}

// The step of tokens [p, p + n) of the fixture's request: new queries, masks over `keys` keys.
ForwardInputs StepOf(const ForwardInputs& full, int64_t p, int64_t n, int64_t keys) {
  ForwardInputs step;
  step.query = full.query.narrow(1, p, n).contiguous();
  if (full.key_padding_mask.defined()) {
    step.key_padding_mask = full.key_padding_mask.narrow(1, 0, keys).contiguous();
  }
  if (full.attn_mask.defined()) {
    const int64_t d = full.attn_mask.dim();
    step.attn_mask = full.attn_mask.narrow(d - 2, p, n).narrow(d - 1, 0, keys).contiguous();
  }
  step.need_weights = full.need_weights;
  step.average_attn_weights = full.average_attn_weights;
  return step;
}

// Expected weights of rows [p, p + n): the first `keys` columns plus the `extra` appended ones.
at::Tensor ExpectedWeights(const at::Tensor& full, int64_t p, int64_t n, int64_t keys,
                           int64_t extra) {
  at::Tensor rows = full.narrow(-2, p, n);
  at::Tensor cols = rows.narrow(-1, 0, keys);
  if (extra > 0) cols = at::cat({cols, rows.narrow(-1, full.size(-1) - extra, extra)}, -1);
  return cols;
}

int64_t ExtraKeys(const FixtureCase& c) {
  return (c.meta["expect"]["add_bias_kv"].get<bool>() ? 1 : 0) +
         (c.meta["expect"]["add_zero_attn"].get<bool>() ? 1 : 0);
}

// Decodes the whole fixture sequence in `session` (first chunk, then `step` tokens at a time),
// checking every answer against the reference rows.
void DecodeAndCheck(client::TensorClient& client, const std::string& session,
                    const FixtureCase& c, int64_t first, int64_t step) {
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

const std::vector<std::string> kCases = {"decode_causal", "decode_causal_bias_kv_zero_attn",
                                         "causal_mask_kpm", "cross_attention",
                                         "bias_kv_zero_attn_kpm", "kdim_vdim"};

class SessionServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shared_ = new SharedServer();
    shared_->Start(kCases, "", {"--kv-block-tokens", "4", "--instances", "2"});
  }
  static void TearDownTestSuite() {
    shared_->Stop();
    delete shared_;
    shared_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(shared_->error.empty()) << shared_->error;
    client_ = shared_->Client();
  }
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

  static SharedServer* shared_;
  std::unique_ptr<client::TensorClient> client_;
};
SharedServer* SessionServer::shared_ = nullptr;

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
                           return info.param.fixture + "_first" +
                                  std::to_string(info.param.first) + "_step" +
                                  std::to_string(info.param.step);
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

  // Refused steps changed nothing: the sequence still decodes exactly, up to max_tokens.
  auto first = client_->Step(id, StepOf(c.inputs, 0, 2, 2));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(TensorsNear(first->output, c.expected_output.narrow(1, 0, 2), 1e-5));
  auto over = client_->Step(id, StepOf(c.inputs, 2, 2, 4));
  EXPECT_EQ(over.status().code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(Contains(over.status().message(), "2 tokens decoded + 2 new exceed its max_tokens 3"));
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
  EXPECT_TRUE(Contains(client_->OpenSession(o).status().message(),
                       "only cross-attention sessions"));
  o.key = at::randn({1, 6, 11});
  o.value = at::randn({1, 6, 20});
  auto wrong = client_->OpenSession(o);
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(wrong.status().message(), "key: expected floating [1, S, 12]"));
}

// Server-wide flags of one test: its own server, repository and metrics port.
struct OwnServer {
  std::unique_ptr<ModelRepositoryDir> repository;
  ServerProcess server;
  int metrics_port = 0;

  ::testing::AssertionResult Start(std::vector<std::string> args) {
    repository = std::make_unique<ModelRepositoryDir>(std::vector<std::string>{"decode_causal"});
    const std::string port_file = server.work_dir() + "/metrics-port";
    args.insert(args.end(), {"--model-repository", repository->path(), "--metrics-address",
                             "127.0.0.1:0", "--metrics-port-file", port_file,
                             "--kv-block-tokens", "4"});
    auto started = server.Start(args);
    if (started) metrics_port = ReadPort(port_file);
    return started;
  }
  std::unique_ptr<client::TensorClient> Client() {
    return std::make_unique<client::TensorClient>(
        client::ClientOptions{server.target(), std::chrono::milliseconds(60000)});
  }
  double Metric(const std::string& name) {
    return ScrapeMetric(metrics_port, name + "{model=\"decode_causal\",version=\"1\"}");
  }
};

std::string OpenOn(client::TensorClient& client, int64_t batch, Status* status = nullptr) {
  client::SessionOpenOptions o;
  o.model = "decode_causal";
  o.batch_size = batch;
  auto opened = client.OpenSession(o);
  if (status) *status = opened.status();
  return opened.ok() ? opened->session_id() : "";
}

// E=32 float32: 256 bytes per token, 1 KiB per 4-token block; 8 KiB = 8 blocks, 4 sessions of
// B=2 after their first token.
TEST(SessionBudget, RefusePolicyRefusesNewSessionsAndStepsAndCloseGivesBlocksBack) {
  const FixtureCase c = Case("decode_causal");
  OwnServer s;
  ASSERT_TRUE(s.Start({"--kv-cache-bytes", "8192"}));
  auto client = s.Client();
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(OpenOn(*client, 2));
    ASSERT_FALSE(ids.back().empty());
    ASSERT_TRUE(client->Step(ids.back(), StepOf(c.inputs, 0, 1, 1)).ok());
  }
  EXPECT_EQ(s.Metric("mha_kv_cache_blocks_used"), 8);
  EXPECT_EQ(s.Metric("mha_kv_cache_blocks_total"), 8);
  EXPECT_EQ(s.Metric("mha_kv_cache_bytes_used"), 8 * 1024);
  EXPECT_EQ(s.Metric("mha_sessions_open"), 4);
  Status refused;
  EXPECT_TRUE(OpenOn(*client, 2, &refused).empty());
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(refused.message(), "KV cache full: a new session needs 2 blocks, 0 of 8"));
  // Tokens 1..3 fit the first blocks; token 4 needs a new block per row.
  ASSERT_TRUE(client->Step(ids[0], StepOf(c.inputs, 1, 3, 4)).ok());
  auto full = client->Step(ids[0], StepOf(c.inputs, 4, 1, 5));
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(client->CloseSession(ids[1]).ok());
  EXPECT_EQ(s.Metric("mha_kv_cache_blocks_used"), 6) << "closing gives the blocks back at once";
  auto retried = client->Step(ids[0], StepOf(c.inputs, 4, 1, 5));  // the session survived
  ASSERT_TRUE(retried.ok()) << retried.status().ToString();
  EXPECT_TRUE(TensorsNear(retried->output, c.expected_output.narrow(1, 4, 1), 1e-5));
  for (size_t i : {0u, 2u, 3u}) ASSERT_TRUE(client->CloseSession(ids[i]).ok());
  EXPECT_EQ(s.Metric("mha_kv_cache_blocks_used"), 0);
  EXPECT_EQ(s.Metric("mha_sessions_open"), 0);
  EXPECT_EQ(s.server.Stop(), 0);
}

TEST(SessionBudget, EvictLruPolicyEvictsTheLeastRecentlyUsedIdleSession) {
  const FixtureCase c = Case("decode_causal");
  OwnServer s;
  ASSERT_TRUE(s.Start({"--kv-cache-bytes", "8192", "--kv-cache-full-policy", "evict-lru"}));
  auto client = s.Client();
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(OpenOn(*client, 2));
    ASSERT_TRUE(client->Step(ids.back(), StepOf(c.inputs, 0, 1, 1)).ok());
  }
  ASSERT_TRUE(client->Step(ids[0], StepOf(c.inputs, 1, 1, 2)).ok());  // ids[1] is now the LRU
  const std::string fifth = OpenOn(*client, 2);
  ASSERT_FALSE(fifth.empty());
  auto evicted = client->Step(ids[1], StepOf(c.inputs, 1, 1, 2));
  EXPECT_EQ(evicted.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(evicted.status().message(), "was evicted (least recently used)"));
  EXPECT_EQ(ScrapeMetric(s.metrics_port, "mha_session_evictions_total{model=\"decode_causal\"}"), 1);
  auto kept = client->Step(ids[0], StepOf(c.inputs, 2, 1, 3));
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_TRUE(TensorsNear(kept->output, c.expected_output.narrow(1, 2, 1), 1e-5));
  EXPECT_EQ(s.server.Stop(), 0);
}

TEST(SessionLifetime, IdleSessionsExpireAndGiveTheirBlocksBack) {
  const FixtureCase c = Case("decode_causal");
  OwnServer s;
  ASSERT_TRUE(s.Start({"--session-idle-timeout-s", "1"}));
  auto client = s.Client();
  const std::string id = OpenOn(*client, 2);
  ASSERT_TRUE(client->Step(id, StepOf(c.inputs, 0, 1, 1)).ok());
  EXPECT_EQ(s.Metric("mha_kv_cache_blocks_used"), 2);
  std::this_thread::sleep_for(1500ms);  // longer than the timeout, whatever the machine's speed
  auto expired = client->Step(id, StepOf(c.inputs, 1, 1, 2));
  EXPECT_EQ(expired.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(expired.status().message(),
                       "expired: idle for more than --session-idle-timeout-s 1 s"));
  EXPECT_EQ(s.Metric("mha_kv_cache_blocks_used"), 0);
  EXPECT_EQ(s.server.Stop(), 0);
}

TEST(SessionLifetime, ARestartLosesSessionsCleanly) {
  const FixtureCase c = Case("decode_causal");
  OwnServer first;
  ASSERT_TRUE(first.Start({}));
  const std::string id = OpenOn(*first.Client(), 2);
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(first.server.Stop(), 0);
  OwnServer second;
  ASSERT_TRUE(second.Start({}));
  auto lost = second.Client()->Step(id, StepOf(c.inputs, 0, 1, 1));
  EXPECT_EQ(lost.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(lost.status().message(), "opened before it restarted"));
  EXPECT_EQ(second.server.Stop(), 0);
}

TEST(SessionLifetime, UnloadingTheModelEndsItsSessions) {
  const FixtureCase c = Case("decode_causal");
  OwnServer s;
  ASSERT_TRUE(s.Start({"--model-control-mode", "explicit"}));
  auto client = s.Client();
  const std::string id = OpenOn(*client, 2);
  ASSERT_TRUE(client->Step(id, StepOf(c.inputs, 0, 1, 1)).ok());
  ASSERT_TRUE(client->UnloadModel("decode_causal").ok());
  auto gone = client->Step(id, StepOf(c.inputs, 1, 1, 2));
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(gone.status().message(), "version 1"));
  EXPECT_TRUE(Contains(gone.status().message(), "unloaded or replaced"));
  EXPECT_EQ(s.server.Stop(), 0);
}

// Steps of several sessions queued while a pass is held (--debug-forward-delay-ms) run as one
// merged pass, each exact.
TEST(SessionBatching, ConcurrentSessionsMergeIntoOnePassWithExactResults) {
  const FixtureCase c = Case("decode_causal");
  OwnServer s;
  ASSERT_TRUE(s.Start({"--debug-forward-delay-ms", "1500", "--instances", "1"}));
  auto client = s.Client();
  constexpr int kSessions = 4;
  std::vector<std::string> ids;
  for (int i = 0; i < kSessions; ++i) ids.push_back(OpenOn(*client, 2));
  std::vector<std::thread> threads;
  std::vector<StatusOr<client::ForwardResult>> results(kSessions, Internal("not run"));
  threads.emplace_back([&] { results[0] = client->Step(ids[0], StepOf(c.inputs, 0, 2, 2)); });
  // The first pass is held; the others queue behind it and go together.
  for (int i = 0; i < 200 && ScrapeMetric(s.metrics_port, "mha_inflight_requests{model=\"decode_causal\"}") < 1; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  for (int i = 1; i < kSessions; ++i) {
    threads.emplace_back([&, i] { results[i] = client->Step(ids[i], StepOf(c.inputs, 0, 2, 2)); });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kSessions; ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].status().ToString();
    EXPECT_TRUE(TensorsNear(results[i]->output, c.expected_output.narrow(1, 0, 2), 1e-5));
  }
  const double passes = ScrapeMetric(s.metrics_port, "mha_batch_size_count{model=\"decode_causal\"}");
  const double steps = ScrapeMetric(s.metrics_port, "mha_batch_size_sum{model=\"decode_causal\"}");
  EXPECT_EQ(steps, kSessions);
  EXPECT_LT(passes, kSessions) << "no two steps were merged";
  EXPECT_EQ(s.server.Stop(), 0);
}

}  // namespace
}  // namespace mha::testing
