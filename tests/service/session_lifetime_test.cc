// Decoding sessions on servers of their own (docs/sessions.md): the KV cache budget refuses or
// evicts (LRU) and closing gives the blocks back (mha_kv_cache_blocks_used), idle sessions expire,
// a restart or an unload ends sessions with NOT_FOUND saying why, and steps of concurrent sessions
// merge into one pass with exact results.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <thread>

#include "hold_gate.h"
#include "session_test_util.h"

namespace mha::testing {
namespace session_lifetime_test {

using namespace std::chrono_literals;

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
  EXPECT_EQ(ScrapeMetric(s.metrics_port, "mha_session_evictions_total{model=\"decode_causal\"}"),
            1);
  auto kept = client->Step(ids[0], StepOf(c.inputs, 2, 1, 3));
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_TRUE(TensorsNear(kept->output, c.expected_output.narrow(1, 2, 1), 1e-5));
  EXPECT_EQ(s.server.Stop(), 0);
}

// Idle expiry is tested on a fake clock, in-process: MultiheadSessions.IdleSessionsExpireWhenThe...
// (tests/unit/serving/multihead_sessions_test.cc), without the 1.5 s sleep it took here.

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

// Steps of several sessions queued while a pass is held (mha-test-server's hold gate) run as one
// merged pass, each exact.
TEST(SessionBatching, ConcurrentSessionsMergeIntoOnePassWithExactResults) {
  const FixtureCase c = Case("decode_causal");
  OwnServer s;
  HoldGate gate;
  gate.Attach(&s.server);
  ASSERT_TRUE(s.Start(gate.Args({"--instances", "1"})));
  auto client = s.Client();
  constexpr int kSessions = 4;
  std::vector<std::string> ids;
  for (int i = 0; i < kSessions; ++i) ids.push_back(OpenOn(*client, 2));
  gate.Hold();
  std::vector<std::thread> threads;
  std::vector<StatusOr<client::ForwardResult>> results(kSessions, Internal("not run"));
  threads.emplace_back([&] { results[0] = client->Step(ids[0], StepOf(c.inputs, 0, 2, 2)); });
  // The first pass is held; the others queue behind it and go together once it is let through.
  EXPECT_TRUE(gate.WaitEntered(1));
  for (int i = 1; i < kSessions; ++i) {
    threads.emplace_back([&, i] { results[i] = client->Step(ids[i], StepOf(c.inputs, 0, 2, 2)); });
  }
  const std::string queued = "mha_queue_depth{model=\"decode_causal\"}";
  EXPECT_TRUE(WaitUntil([&] { return ScrapeMetric(s.metrics_port, queued) >= kSessions - 1; },
                        "the other steps to queue"));
  EXPECT_EQ(ScrapeMetric(s.metrics_port, queued), kSessions - 1);
  gate.ReleaseAll();
  for (auto& t : threads) t.join();
  for (int i = 0; i < kSessions; ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].status().ToString();
    EXPECT_TRUE(TensorsNear(results[i]->output, c.expected_output.narrow(1, 0, 2), 1e-5));
  }
  const double passes =
      ScrapeMetric(s.metrics_port, "mha_batch_size_count{model=\"decode_causal\"}");
  const double steps = ScrapeMetric(s.metrics_port, "mha_batch_size_sum{model=\"decode_causal\"}");
  EXPECT_EQ(steps, kSessions);
  EXPECT_LT(passes, kSessions) << "no two steps were merged";
  EXPECT_EQ(s.server.Stop(), 0);
}

}  // namespace session_lifetime_test
}  // namespace mha::testing
