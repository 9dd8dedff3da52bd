// MultiheadSessions in-process (server/serving/kinds/multihead/multihead_sessions.h): a runner that
// holds every submitted step until the test runs it, so ordering, queuing behind a step in flight,
// close with waiting steps, LRU eviction of idle sessions only, and the pool's accounting are
// checked without any timing.
#include "server/serving/kinds/multihead/multihead_sessions.h"

#include <gtest/gtest.h>

#include "multihead_sessions_test_util.h"
#include "server/serving/observability/stats_aggregator.h"

namespace mha::serve {
namespace {

using testing::Contains;
using testing::TensorsNear;
using namespace testing_sessions;  // NOLINT(build/namespaces)

TEST(MultiheadSessions, StepsOfOneSessionWaitBehindTheOneInFlightAndApplyInOrder) {
  const Fixture f = Load();
  HeldRunner runner;
  auto directory = std::make_shared<SessionDirectory>();
  MultiheadSessions store(Options(8), RequestLimits{}, f.model, {"m", "1"}, directory, &runner,
                          nullptr);
  auto info = Open(store, 2, 12);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  Answers answers;
  for (int64_t p = 0; p < 3; ++p) store.Step(info->id, StepTask(f, p), answers.Callback());
  EXPECT_EQ(runner.queue_depth(), 1u) << "one step of a session in the scheduler at a time";
  Answers refused;
  store.Step(info->id, StepTask(f, 3), refused.Callback());  // 2 already wait: over the limit
  ASSERT_EQ(refused.results.size(), 1u);
  EXPECT_EQ(refused.results[0].status.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(refused.results[0].status.message(), "2 steps waiting"));
  for (int64_t p = 0; p < 3; ++p) {
    runner.RunOldest();
    ASSERT_EQ(answers.results.size(), static_cast<size_t>(p + 1));
    const InferenceResult& r = answers.results[p];
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(r.session_tokens, p + 1);
    EXPECT_TRUE(TensorsNear(ToTensor(r.outputs.output), f.c.expected_output.narrow(1, p, 1), 1e-5));
  }
  EXPECT_EQ(runner.queue_depth(), 0u);
}

// Idle expiry on a fake clock (no sleeping): a session idle up to the timeout keeps stepping; past
// it, the next call finds it expired and its KV blocks are back in the pool.
TEST(MultiheadSessions, IdleSessionsExpireWhenTheClockPassesTheTimeout) {
  const Fixture f = Load();
  HeldRunner runner;
  FakeClock clock;
  SessionOptions o = Options(8);
  o.idle_timeout_s = 1;
  o.clock = &clock;
  StatsAggregator stats("m", "1");
  MultiheadSessions store(o, RequestLimits{}, f.model, {"m", "1"},
                          std::make_shared<SessionDirectory>(), &runner, &stats);
  auto info = Open(store, 2, 12);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  Answers answers;
  store.Step(info->id, StepTask(f, 0), answers.Callback());
  runner.RunOldest();
  ASSERT_EQ(answers.results.size(), 1u);
  EXPECT_EQ(stats.Read().kv_blocks_used, 2);  // one block per row
  clock.Advance(std::chrono::milliseconds(999));
  store.Step(info->id, StepTask(f, 1), answers.Callback());
  runner.RunOldest();
  ASSERT_EQ(answers.results.size(), 2u);
  EXPECT_TRUE(answers.results[1].status.ok()) << answers.results[1].status.ToString();
  clock.Advance(std::chrono::milliseconds(1001));
  store.Step(info->id, StepTask(f, 2), answers.Callback());
  ASSERT_EQ(answers.results.size(), 3u);  // refused at once: nothing reached the runner
  EXPECT_EQ(answers.results[2].status.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(answers.results[2].status.message(),
                       "expired: idle for more than --session-idle-timeout-s 1 s"))
      << answers.results[2].status.message();
  EXPECT_EQ(stats.Read().kv_blocks_used, 0);
  EXPECT_EQ(stats.Read().sessions_open, 0);
}

TEST(MultiheadSessions, CloseAnswersWaitingStepsAndGivesBlocksBackAfterTheStepInFlight) {
  const Fixture f = Load();
  HeldRunner runner;
  MultiheadSessions store(Options(8), RequestLimits{}, f.model, {"m", "1"},
                          std::make_shared<SessionDirectory>(), &runner, nullptr);
  auto info = Open(store, 2, 12);
  ASSERT_TRUE(info.ok());
  Answers answers;
  store.Step(info->id, StepTask(f, 0), answers.Callback());
  store.Step(info->id, StepTask(f, 1), answers.Callback());
  EXPECT_EQ(store.usage().blocks_used, 2);
  auto closed = store.Close(info->id);
  ASSERT_TRUE(closed.ok());
  ASSERT_EQ(answers.results.size(), 1u) << "the waiting step is answered at once";
  EXPECT_EQ(answers.results[0].status.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(answers.results[0].status.message(),
                       "was closed (CloseSession) (while this step waited)"));
  EXPECT_EQ(store.usage().blocks_used, 2) << "the step in flight still writes its blocks";
  runner.RunOldest();
  EXPECT_TRUE(answers.results[1].status.ok());
  EXPECT_EQ(store.usage().blocks_used, 0);
  EXPECT_EQ(store.usage().sessions, 0);
}

TEST(MultiheadSessions, EvictLruSkipsSessionsWithAStepInFlight) {
  const Fixture f = Load();
  HeldRunner runner;
  auto directory = std::make_shared<SessionDirectory>();
  MultiheadSessions store(Options(4, KvFullPolicy::kEvictLru), RequestLimits{}, f.model, {"m", "1"},
                          directory, &runner, nullptr);
  auto a = Open(store, 2, 12);  // each takes a block per row
  auto b = Open(store, 2, 12);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(store.usage().blocks_used, 4);
  Answers answers;
  store.Step(a->id, StepTask(f, 0), answers.Callback());
  runner.RunOldest();                                     // a: idle, least recently used
  store.Step(b->id, StepTask(f, 0), answers.Callback());  // b: in flight
  auto c = Open(store, 2, 12);                            // needs 2 blocks: a must go
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(Contains(directory->NotFoundFor(a->id).message(), "was evicted"));
  store.Step(c->id, StepTask(f, 0), answers.Callback());  // c: in flight too
  auto d = Open(store, 2, 12);                            // every holder is busy
  EXPECT_EQ(d.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(d.status().message(), "a new session needs 2 blocks, 0 of 4 free"));
  runner.RunOldest();
  runner.RunOldest();
  ASSERT_EQ(answers.results.size(), 3u);
  for (size_t i = 1; i < 3; ++i) {
    ASSERT_TRUE(answers.results[i].status.ok());
    EXPECT_TRUE(TensorsNear(ToTensor(answers.results[i].outputs.output),
                            f.c.expected_output.narrow(1, 0, 1), 1e-5));
  }
}

TEST(MultiheadSessions, DestroyingTheStoreEndsItsSessionsWithTheReason) {
  const Fixture f = Load();
  HeldRunner runner;
  auto directory = std::make_shared<SessionDirectory>();
  std::string id;
  {
    MultiheadSessions store(Options(8), RequestLimits{}, f.model, {"m", "3"}, directory, &runner,
                            nullptr);
    auto info = Open(store, 1, 4);
    ASSERT_TRUE(info.ok());
    id = info->id;
    EXPECT_TRUE(directory->Find(id).ok());
  }
  const Status gone = directory->Find(id).status();
  EXPECT_EQ(gone.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(gone.message(), "its model 'm' version 3 was unloaded or replaced"));
  EXPECT_TRUE(Contains(directory->NotFoundFor("s-x").message(), "is unknown"));
}

}  // namespace
}  // namespace mha::serve
