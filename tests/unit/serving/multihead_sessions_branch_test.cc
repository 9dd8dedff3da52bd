// MultiheadSessions' fork, truncate and spill (sessions/session_store.h, SessionTable's spill
// policy) on the decode_causal fixture (E=32 H=4 B=2 T=12, blocks of 4 tokens): every branch's
// answers equal the causal forward of that branch's own sequence (the fixture's PyTorch rows where
// the branch is the fixture's sequence, else the stateless causal forward, itself checked against
// PyTorch first); a fork takes no block until it writes; references go back to zero; refusals
// name the field and the numbers; sessions spill and come back exactly under a pool a sixth of
// their needs, and a full spill store evicts with the reason.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "multihead_sessions_test_util.h"
#include "server/serving/observability/stats_aggregator.h"

namespace mha::serve {
namespace {

using testing::Contains;
using testing::TensorsNear;
using namespace testing_sessions;  // NOLINT(build/namespaces)

// The stateless causal forward of `seq` [B, T, E] (self-attention: key = value = query).
at::Tensor CausalForward(const Fixture& f, const at::Tensor& seq) {
  ForwardInputs in;
  in.query = seq;
  in.key = seq;
  in.value = seq;
  in.is_causal = true;
  InferenceTask task;
  task.inputs = testing::ToHostInputs(in);
  HostOutputs out;
  const Status s = MakeModelPassRunner(f.model)->RunOne(task, &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return ToTensor(out.output);
}

// Steps `session` with token rows `tokens` [B, n, E] one at a time, returning the outputs.
at::Tensor StepAll(const Fixture& f, MultiheadSessions& store, HeldRunner& runner,
                   const std::string& id, const at::Tensor& tokens) {
  std::vector<at::Tensor> outs;
  for (int64_t p = 0; p < tokens.size(1); ++p) {
    Answers answers;
    InferenceTask task;
    task.inputs.query = ToHost(tokens.narrow(1, p, 1).contiguous());
    store.Step(id, std::move(task), answers.Callback());
    if (runner.queue_depth() > 0) runner.RunOldest();
    EXPECT_EQ(answers.results.size(), 1u);
    if (answers.results.size() != 1) return at::Tensor();
    EXPECT_TRUE(answers.results[0].status.ok()) << answers.results[0].status.ToString();
    if (!answers.results[0].status.ok()) return at::Tensor();
    outs.push_back(ToTensor(answers.results[0].outputs.output));
  }
  return at::cat(outs, 1);
}

TEST(MultiheadSessionsBranch, AForkSharesBlocksAndEachBranchEqualsItsOwnCausalForward) {
  const Fixture f = Load();
  const at::Tensor x = f.c.inputs.query;  // [2, 12, 32]
  ASSERT_TRUE(TensorsNear(CausalForward(f, x), f.c.expected_output, 1e-5)) << "the reference";
  HeldRunner runner;
  StatsAggregator stats("m", "1");
  MultiheadSessions store(Options(16), RequestLimits{}, f.model, {"m", "1"},
                          std::make_shared<SessionDirectory>(), &runner, &stats);
  auto a = Open(store, 2, 12);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE(TensorsNear(StepAll(f, store, runner, a->id, x.narrow(1, 0, 6)),
                          f.c.expected_output.narrow(1, 0, 6), 1e-5));
  EXPECT_EQ(store.usage().blocks_used, 4);  // 6 tokens: 2 blocks per row
  auto fork = store.Fork(a->id, 5, "a.fork", Worker());
  ASSERT_TRUE(fork.ok()) << fork.status().ToString();
  EXPECT_EQ(fork->id, "a.fork");
  EXPECT_EQ(fork->tokens, 5);
  EXPECT_EQ(fork->blocks, 4);
  EXPECT_EQ(fork->shared_blocks, 4);
  EXPECT_EQ(store.usage().blocks_used, 4) << "a fork takes no block until it writes";
  EXPECT_EQ(stats.Read().kv_blocks_shared, 4);
  // The fork writes another token at position 5: into the shared partial block, copied first.
  at::Tensor branch = x.clone();
  branch.narrow(1, 5, 7).copy_(x.narrow(1, 0, 7).flip(1));
  EXPECT_TRUE(TensorsNear(StepAll(f, store, runner, fork->id, branch.narrow(1, 5, 7)),
                          CausalForward(f, branch).narrow(1, 5, 7), 1e-5));
  EXPECT_EQ(stats.Read().kv_copies_on_write, 2) << "one copy per row";
  // The source still sees its own token 5.
  EXPECT_TRUE(TensorsNear(StepAll(f, store, runner, a->id, x.narrow(1, 6, 6)),
                          f.c.expected_output.narrow(1, 6, 6), 1e-5));
  // A fork of everything of a fork; then every branch closes: the pool is empty again.
  auto whole = store.Fork(fork->id, 0, "", Worker());
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(whole->tokens, 12);
  for (const std::string& id : {a->id, fork->id, whole->id}) ASSERT_TRUE(store.Close(id).ok());
  EXPECT_EQ(store.usage().blocks_used, 0);
  EXPECT_EQ(stats.Read().kv_blocks_shared, 0);
}

TEST(MultiheadSessionsBranch, TruncateGivesWholeBlocksBackAndTheReplayEqualsTheFixture) {
  const Fixture f = Load();
  const at::Tensor x = f.c.inputs.query;
  HeldRunner runner;
  MultiheadSessions store(Options(16), RequestLimits{}, f.model, {"m", "1"},
                          std::make_shared<SessionDirectory>(), &runner, nullptr);
  auto a = Open(store, 2, 12);
  ASSERT_TRUE(a.ok());
  at::Tensor draft = x.narrow(1, 0, 9).clone();
  draft.narrow(1, 3, 6).mul_(-1.5);  // speculative tokens 3..8, rejected below
  ASSERT_TRUE(StepAll(f, store, runner, a->id, draft).defined());
  EXPECT_EQ(store.usage().blocks_used, 6);
  auto cut = store.Truncate(a->id, 3, Worker());
  ASSERT_TRUE(cut.ok()) << cut.status().ToString();
  EXPECT_EQ(cut->tokens, 3);
  EXPECT_EQ(cut->blocks, 2);
  EXPECT_EQ(store.usage().blocks_used, 2);
  EXPECT_TRUE(TensorsNear(StepAll(f, store, runner, a->id, x.narrow(1, 3, 9)),
                          f.c.expected_output.narrow(1, 3, 9), 1e-5));
  ASSERT_TRUE(store.Truncate(a->id, 0, Worker()).ok());
  EXPECT_EQ(store.usage().blocks_used, 0);
}

TEST(MultiheadSessionsBranch, RefusalsNameTheFieldAndTheNumbers) {
  const Fixture f = Load();
  HeldRunner runner;
  auto directory = std::make_shared<SessionDirectory>();
  MultiheadSessions store(Options(16), RequestLimits{}, f.model, {"m", "1"}, directory, &runner,
                          nullptr);
  auto a = Open(store, 2, 12);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(StepAll(f, store, runner, a->id, f.c.inputs.query.narrow(1, 0, 2)).defined());
  EXPECT_EQ(store.Fork("s-nope", 0, "", Worker()).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(store.Truncate("s-nope", 0, Worker()).status().message(), "is unknown"));
  const Status below = store.Truncate(a->id, -1, Worker()).status();
  EXPECT_EQ(below.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      Contains(below.message(), "tokens: -1 is below 0 (session '" + a->id + "' holds 2 tokens)"));
  const Status past = store.Fork(a->id, 3, "", Worker()).status();
  EXPECT_EQ(past.code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(Contains(past.message(), "tokens: 3 is past the session's length (session '" + a->id +
                                           "' holds 2 tokens)"));
  EXPECT_EQ(store.Fork(a->id, 0, a->id, Worker()).status().code(), StatusCode::kAlreadyExists);
  Answers answers;
  store.Step(a->id, StepTask(f, 2), answers.Callback());  // in the runner: a is busy
  for (const Status& busy :
       {store.Fork(a->id, 0, "", Worker()).status(), store.Truncate(a->id, 1, Worker()).status()}) {
    EXPECT_EQ(busy.code(), StatusCode::kFailedPrecondition);
    EXPECT_TRUE(Contains(busy.message(), "session '" + a->id + "' has a step queued or running: "));
  }
  runner.RunOldest();
  ASSERT_EQ(answers.results.size(), 1u);
  EXPECT_TRUE(store.Truncate(a->id, 1, Worker()).ok()) << "idle again";
  EXPECT_EQ(store.usage().sessions, 1) << "no refused fork left a session";
}

// Six sessions of 12 tokens (6 blocks each) take turns on a pool of 6 blocks: each step spills
// the least recently used idle session and restores its own, and every answer is exact.
TEST(MultiheadSessionsBranch, SpillUnderATinyPoolRestoresEverySessionExactly) {
  const Fixture f = Load();
  testing::TempDir dir;
  HeldRunner runner;
  StatsAggregator stats("m", "1");
  SessionOptions o = Options(6, KvFullPolicy::kSpill);
  o.spill_dir = dir.path();
  {
    MultiheadSessions store(o, RequestLimits{}, f.model, {"m", "1"},
                            std::make_shared<SessionDirectory>(), &runner, &stats);
    std::vector<std::string> ids;
    for (int i = 0; i < 6; ++i) {
      auto s = Open(store, 2, 12);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      ids.push_back(s->id);
    }
    for (int64_t p = 0; p < 12; ++p) {
      for (const std::string& id : ids) {
        at::Tensor out = StepAll(f, store, runner, id, f.c.inputs.query.narrow(1, p, 1));
        ASSERT_TRUE(out.defined()) << "session " << id << " token " << p;
        EXPECT_TRUE(TensorsNear(out, f.c.expected_output.narrow(1, p, 1), 1e-5))
            << "session " << id << " token " << p;
      }
    }
    const StatsSnapshot s = stats.Read();
    EXPECT_GT(s.session_restores, 0u);
    EXPECT_EQ(s.session_evictions, 0u);
    EXPECT_GT(s.sessions_spilled, 0);
    EXPECT_GT(s.kv_spill_bytes, 0);
    EXPECT_EQ(s.restore.count, s.session_restores);
    for (const std::string& id : ids) ASSERT_TRUE(store.Close(id).ok());
    EXPECT_EQ(stats.Read().kv_spill_bytes, 0) << "closing a spilled session removes its bytes";
    EXPECT_EQ(stats.Read().sessions_spilled, 0);
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "the version's spill folder is removed";
}

TEST(MultiheadSessionsBranch, AFullSpillStoreEvictsWithTheReason) {
  const Fixture f = Load();
  testing::TempDir dir;
  HeldRunner runner;
  auto directory = std::make_shared<SessionDirectory>();
  SessionOptions o = Options(2, KvFullPolicy::kSpill);
  o.spill_dir = dir.path();
  o.spill_bytes = 100;  // less than one token of one session (2 rows x 256 bytes)
  MultiheadSessions store(o, RequestLimits{}, f.model, {"m", "1"}, directory, &runner, nullptr);
  auto a = Open(store, 2, 12);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(StepAll(f, store, runner, a->id, f.c.inputs.query.narrow(1, 0, 1)).defined());
  auto b = Open(store, 2, 12);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const Status gone = directory->NotFoundFor(a->id);
  EXPECT_TRUE(Contains(gone.message(), "was evicted (least recently used)"));
  EXPECT_TRUE(Contains(gone.message(), "the spill store is full (--kv-spill-bytes 100)"));
}

// A cross-attention session's cache holds the encoder's keys: it forks whole only (the fork
// attends over the same keys, exactly) and is never truncated.
TEST(MultiheadSessionsBranch, ACrossAttentionSessionForksWholeAndIsNotTruncated) {
  auto c = testing::LoadFixtureCase("cross_attention");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const Fixture f{*c, testing::LoadCaseModel(*c)};
  HeldRunner runner;
  MultiheadSessions store(Options(64), RequestLimits{}, f.model, {"m", "1"},
                          std::make_shared<SessionDirectory>(), &runner, nullptr);
  const int64_t t = f.c.inputs.query.size(1);
  auto a =
      Open(store, f.c.inputs.query.size(0), t, ToHost(f.c.inputs.key), ToHost(f.c.inputs.value));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE(TensorsNear(StepAll(f, store, runner, a->id, f.c.inputs.query.narrow(1, 0, 2)),
                          f.c.expected_output.narrow(1, 0, 2), 1e-5));
  const Status cut = store.Truncate(a->id, 1, Worker()).status();
  EXPECT_EQ(cut.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(cut.message(),
                       "is a cross-attention session: its cache holds the "
                       "encoder's keys"));
  const Status part = store.Fork(a->id, 1, "", Worker()).status();
  EXPECT_EQ(part.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(part.message(), "so it forks whole only (tokens 0 or 2), got 1"));
  auto whole = store.Fork(a->id, 0, "a.whole", Worker());
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(whole->tokens, 2);
  EXPECT_TRUE(whole->cross);
  EXPECT_EQ(whole->shared_blocks, whole->blocks);
  EXPECT_TRUE(
      TensorsNear(StepAll(f, store, runner, "a.whole", f.c.inputs.query.narrow(1, 2, t - 2)),
                  f.c.expected_output.narrow(1, 2, t - 2), 1e-5));
}

}  // namespace
}  // namespace mha::serve
