// SessionTable (server/serving/sessions/session_table.h) over a real KV block pool and a fake
// cache that holds pool blocks: LRU eviction ends the least recently used session no step holds
// (never `keep`), counts it and tells the directory why; refuse answers RESOURCE_EXHAUSTED in the
// kind's words; idle expiry skips held sessions; a held session's blocks go back when released;
// the table's end tells every session's id why; spill moves the least recently used idle session
// into the store (host memory for a pool off the CPU) and restore brings it back, a full store
// evicts with the reason.
#include "server/serving/sessions/session_table.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "batch_test_util.h"

namespace mha::serve {
namespace {

// Holds pool blocks; a spill keeps 100 bytes per block in the store under its key.
struct FakeCache {
  std::shared_ptr<KvBlockPool> pool;
  std::vector<int64_t> blocks;
  std::shared_ptr<KvSpillStore> store;
  std::string key;
  int64_t spilled_blocks = 0;
  void Release() {
    pool->Release(blocks);
    blocks.clear();
    if (store) store->Remove(key);
    store.reset();
  }
  int64_t blocks_held() const { return static_cast<int64_t>(blocks.size()); }
  bool spilled() const { return store != nullptr; }
  int64_t BlocksToRestore() const { return spilled_blocks; }
  int64_t spilled_bytes() const { return spilled_blocks * 100; }
  Status Spill(std::shared_ptr<KvSpillStore> to, const std::string& k) {
    const std::vector<char> bytes(blocks.size() * 100, 1);
    MHA_RETURN_IF_ERROR(to->Put(k, bytes.data(), static_cast<int64_t>(bytes.size())));
    spilled_blocks = blocks_held();
    pool->Release(blocks);
    blocks.clear();
    store = std::move(to);
    key = k;
    return Status::Ok();
  }
  Status Restore() {
    auto got = pool->Allocate(spilled_blocks);
    if (!got.ok()) return got.status();
    blocks = *got;
    store->Remove(key);
    store.reset();
    return Status::Ok();
  }
};

using FakeSession = SessionState<FakeCache>;

class SessionTableTest : public ::testing::Test {
 protected:
  void Make(KvFullPolicy policy, int64_t spill_bytes = 1 << 20) {
    SessionOptions o;
    o.spill_bytes = spill_bytes;
    o.pool.capacity_bytes = 1 << 20;
    o.pool.block_tokens = 4;
    o.full_policy = policy;
    o.idle_timeout_s = 10;
    table_ = std::make_unique<SessionTable<FakeSession>>(o, SessionLocation{"m", "1"}, directory_,
                                                         &stats_);
    auto model = testing::LoadFixtureModel("self_basic");
    ASSERT_NE(model, nullptr);
    ASSERT_TRUE(table_
                    ->EnsurePoolLocked([&] { return KvBlockPool::Create(o.pool, *model); },
                                       [](const KvBlockPool&) {}, "cuda:0")
                    .ok());
  }
  // A step that holds `session` at the table's gate (started: nothing waits before it).
  StepTurnPtr Hold(const std::shared_ptr<FakeSession>& session) {
    auto turn = std::make_shared<StepTurn>();
    turn->lines = {&session->steps};
    bool now = false;
    EXPECT_TRUE(table_->gate().EnterLocked(turn, {"session"}, &now).ok());
    EXPECT_TRUE(now);
    return turn;
  }
  // A session named `id` holding `blocks` blocks, last used at `t` seconds.
  std::shared_ptr<FakeSession> Open(const std::string& id, int64_t blocks, int t) {
    auto s = std::make_shared<FakeSession>();
    s->info.id = id;
    s->cache = std::make_unique<FakeCache>();
    s->cache->pool = table_->pool();
    auto got = table_->pool()->Allocate(blocks);
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    if (got.ok()) s->cache->blocks = *got;
    s->last_used = Clock::time_point(std::chrono::seconds(t));
    EXPECT_TRUE(table_->AddLocked(s).ok());
    return s;
  }
  std::string Why(const std::string& id) { return directory_->NotFoundFor(id).message(); }
  // Ends every session (the version is unloaded); no step waits for one in these tests.
  void EndAll() {
    std::vector<StepGate::Dropped> dropped;
    Status why;
    table_->EndAllLocked(&dropped, &why);
    EXPECT_TRUE(dropped.empty());
  }

  std::shared_ptr<SessionDirectory> directory_ = std::make_shared<SessionDirectory>();
  StatsAggregator stats_{"m", "1"};
  std::unique_ptr<SessionTable<FakeSession>> table_;
  CallerThread caller_;
};

TEST_F(SessionTableTest, EvictionEndsTheLeastRecentlyUsedSessionThatNoStepHolds) {
  Make(KvFullPolicy::kEvictLru);
  const int64_t total = table_->pool()->total_blocks();
  auto held = Open("held", total / 4, 1);  // the oldest, but a step holds it
  const StepTurnPtr step = Hold(held);
  auto keep = Open("keep", total / 4, 2);  // older than `old`, but the one asking
  auto old = Open("old", total / 4, 3);
  auto recent = Open("recent", total - 3 * (total / 4), 4);
  ASSERT_EQ(table_->pool()->free_blocks(), 0);
  EXPECT_TRUE(table_->MakeRoomLocked(1, keep.get(), "a test", "4 tokens per block", caller_).ok());
  EXPECT_TRUE(old->ended);
  EXPECT_FALSE(held->ended || keep->ended || recent->ended);
  EXPECT_EQ(table_->sessions().count("old"), 0u);
  EXPECT_NE(Why("old").find("was evicted (least recently used)"), std::string::npos) << Why("old");
  EXPECT_EQ(stats_.Read().session_evictions, 1u);
  EXPECT_EQ(table_->UsageLocked().sessions, 3);
}

TEST_F(SessionTableTest, RefuseNamesWhatWasAskedAndThePoolInTheKindsWords) {
  Make(KvFullPolicy::kRefuse);
  auto all = Open("all", table_->pool()->total_blocks(), 1);
  const Status s =
      table_->MakeRoomLocked(2, nullptr, "a new session", "4 tokens per block", caller_);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("KV cache full: a new session needs 2 blocks, 0 of "),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("(4 tokens per block; --kv-cache-bytes, --kv-cache-full-policy "
                             "refuse)"),
            std::string::npos)
      << s.message();
  EXPECT_FALSE(all->ended);
}

TEST_F(SessionTableTest, ExpirySkipsHeldSessionsAndAHeldSessionKeepsItsBlocksUntilReleased) {
  Make(KvFullPolicy::kRefuse);
  auto idle = Open("idle", 2, 0);
  auto busy = Open("busy", 3, 0);
  const StepTurnPtr step = Hold(busy);
  table_->SweepLocked(Clock::time_point(std::chrono::seconds(5)));  // within the 10 s timeout
  EXPECT_FALSE(idle->ended);
  table_->SweepLocked(Clock::time_point(std::chrono::seconds(11)));
  EXPECT_TRUE(idle->ended);
  EXPECT_EQ(idle->cache->blocks_held(), 0);
  EXPECT_NE(Why("idle").find("expired: idle for more than --session-idle-timeout-s 10 s"),
            std::string::npos);
  EXPECT_FALSE(busy->ended);
  table_->EndLocked(busy, "was closed (CloseSession)");
  EXPECT_TRUE(busy->ended);
  EXPECT_EQ(busy->cache->blocks_held(), 3);  // its step still runs
  EXPECT_TRUE(table_->LeaveLocked(step, {busy}).empty());
  EXPECT_EQ(busy->cache->blocks_held(), 0);  // the step left: its blocks went back
  EndAll();
  auto last = Open("last", 1, 0);
  EndAll();
  EXPECT_NE(Why("last").find("ended: its model 'm' version 1 was unloaded or replaced"),
            std::string::npos)
      << Why("last");
  last->cache->Release();
  EXPECT_EQ(table_->pool()->used_blocks(), 0);
}

TEST_F(SessionTableTest, SpillMovesTheLeastRecentlyUsedIdleSessionAndRestoreBringsItBack) {
  Make(KvFullPolicy::kSpill);
  ASSERT_NE(table_->spill_store(), nullptr);
  EXPECT_EQ(table_->spill_store()->Describe(), "host memory") << "a pool off the CPU";
  const int64_t total = table_->pool()->total_blocks();
  auto held = Open("held", total / 4, 1);  // the oldest, but a step holds it
  const StepTurnPtr step = Hold(held);
  auto old = Open("old", total / 4, 2);
  auto recent = Open("recent", total - 2 * (total / 4), 3);
  EXPECT_TRUE(table_->MakeRoomLocked(1, nullptr, "a test", "4 tokens per block", caller_).ok());
  EXPECT_TRUE(old->cache->spilled());
  EXPECT_FALSE(old->ended) << "a spilled session stays open";
  EXPECT_FALSE(held->cache->spilled() || recent->cache->spilled());
  EXPECT_EQ(table_->pool()->free_blocks(), total / 4);
  StatsSnapshot s = stats_.Read();
  EXPECT_EQ(s.sessions_spilled, 1);
  EXPECT_EQ(s.kv_spill_bytes, total / 4 * 100);
  EXPECT_EQ(s.session_spills, 1u);
  EXPECT_EQ(s.session_evictions, 0u);
  // Its restore needs its blocks back: `recent` (idle) spills, never `old` itself.
  ASSERT_TRUE(table_->pool()->Allocate(table_->pool()->free_blocks()).ok());
  EXPECT_TRUE(table_->RestoreLocked(old, "4 tokens per block", caller_).ok());
  EXPECT_FALSE(old->cache->spilled());
  EXPECT_EQ(old->cache->blocks_held(), total / 4);
  EXPECT_TRUE(recent->cache->spilled());
  s = stats_.Read();
  EXPECT_EQ(s.session_restores, 1u);
  EXPECT_EQ(s.restore.count, 1u);
  EXPECT_EQ(s.sessions_spilled, 1);
  table_->EndLocked(recent, "was closed (a test)");
  EXPECT_EQ(table_->spill_store()->bytes_held(), 0) << "ending a spilled session drops its bytes";
  EXPECT_EQ(table_->spilled_sessions(), 0);
  table_->LeaveLocked(step, {held});
}

TEST_F(SessionTableTest, AFullSpillStoreEvictsWithTheReason) {
  Make(KvFullPolicy::kSpill, /*spill_bytes=*/50);  // not one block's 100 bytes
  auto all = Open("all", table_->pool()->total_blocks(), 1);
  EXPECT_TRUE(table_->MakeRoomLocked(1, nullptr, "a test", "4 tokens per block", caller_).ok());
  EXPECT_TRUE(all->ended);
  EXPECT_NE(Why("all").find("was evicted (least recently used) to free KV cache blocks for another "
                            "session: the spill store is full (--kv-spill-bytes 50)"),
            std::string::npos)
      << Why("all");
  EXPECT_EQ(stats_.Read().session_evictions, 1u);
}

}  // namespace
}  // namespace mha::serve
