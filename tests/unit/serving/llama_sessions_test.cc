// LlamaSessions (server/serving/kinds/llama/llama_sessions.h) over the fixture stack
// stack4_sessions (L=4, KV=2, D=8: 128 bytes per token per layer in float32): ids server-wide,
// one block per layer taken at open, refusals naming the entry, messages taking turns at the
// session gate, the layer-order rule at Prepare, a session closed while a step holds it and while
// messages wait for it, the full pool under refuse and evict-lru, idle expiry on
// a fake clock, fork and truncate refusals, and the spill policy: three sessions on a pool of one
// session's blocks, every layer of every step equal to the fixture's PyTorch rows.
#include "server/serving/kinds/llama/llama_sessions.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "llama_serving_util.h"
#include "mha/llama_session.h"

namespace mha::serve {
namespace {

using testing::Contains;

class LlamaSessionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::LoadFixtureModel("stack4_sessions");
    ASSERT_NE(model_.stack, nullptr);
    ASSERT_EQ(model_.info.kv_bytes_per_token, 2 * 2 * 8 * 4);
  }
  // A store whose pool holds `blocks` blocks of 4 tokens (512 bytes each).
  std::unique_ptr<LlamaSessions> Store(int64_t blocks, KvFullPolicy policy = KvFullPolicy::kRefuse,
                                       const std::string& spill_dir = "") {
    SessionOptions o = testing::SmallPool(blocks * 4 * model_.info.kv_bytes_per_token, 4);
    o.full_policy = policy;
    if (!spill_dir.empty()) o.spill_dir = spill_dir;
    o.clock = &clock_;
    o.idle_timeout_s = 60;
    o.max_pending_steps = 2;
    return std::make_unique<LlamaSessions>(o, RequestLimits{}, model_.stack, model_.info,
                                           SessionLocation{"llama", "1"}, directory_, nullptr);
  }

  // A step message at the gate: its hold once its turn came, or why a close refused it.
  struct Message {
    Status entered;
    std::shared_ptr<std::optional<LlamaSessions::Hold>> hold =
        std::make_shared<std::optional<LlamaSessions::Hold>>();
    std::shared_ptr<Status> refused = std::make_shared<Status>();
    bool started() const { return hold->has_value(); }
    const LlamaSessions::Ptr& session(size_t i = 0) const { return (*hold)->sessions.at(i); }
  };
  static Message Enter(LlamaSessions& store, const std::vector<std::string>& ids) {
    Message m;
    m.entered = store.Acquire(
        ids, [](size_t i) { return "entries[" + std::to_string(i) + "].session_id: "; },
        [hold = m.hold](LlamaSessions::Hold h, CallerThread&) { *hold = std::move(h); },
        [refused = m.refused](Status why) { *refused = std::move(why); }, testing::Worker());
    return m;
  }

  LoadedLlamaModel model_;
  FakeClock clock_;
  std::shared_ptr<SessionDirectory> directory_ = std::make_shared<SessionDirectory>();
};

TEST_F(LlamaSessionsTest, OpenTakesOneBlockPerLayerAndIdsAreServerWide) {
  auto store = Store(16);
  auto a = testing::OpenLlama(*store, 100, "client-a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->id, "client-a");
  EXPECT_EQ(a->max_tokens, 100);
  EXPECT_EQ(a->blocks, 4);  // the first token's block in each of the 4 layers
  EXPECT_EQ(a->block_tokens, 4);
  EXPECT_EQ(store->usage().blocks_used, 4);
  EXPECT_EQ(store->usage().block_bytes, 4 * 128);
  auto again = testing::OpenLlama(*store, 100, "client-a");
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  auto generated = testing::OpenLlama(*store, 100, "");
  ASSERT_TRUE(generated.ok());
  EXPECT_EQ(generated->id.substr(0, 2), "s-");
  auto closed = store->Close("client-a");
  ASSERT_TRUE(closed.ok());
  EXPECT_EQ(closed->blocks, 4);
  EXPECT_EQ(store->usage().blocks_used, 4);  // the generated session's
  EXPECT_TRUE(Contains(store->Close("client-a").status().message(), "was closed (CloseSession)"));
}

TEST_F(LlamaSessionsTest, AcquireNamesTheEntryAndMessagesTakeTurnsInArrivalOrder) {
  auto store = Store(16);
  ASSERT_TRUE(testing::OpenLlama(*store, 100, "a").ok());
  ASSERT_TRUE(testing::OpenLlama(*store, 100, "b").ok());
  const Message unknown = Enter(*store, {"a", "nope"});
  EXPECT_EQ(unknown.entered.code(), StatusCode::kNotFound);
  EXPECT_TRUE(
      Contains(unknown.entered.message(), "entries[1].session_id: session 'nope' is unknown"))
      << unknown.entered.message();
  const Message first = Enter(*store, {"a"});
  const Message both = Enter(*store, {"b", "a"});  // waits for `first` at a
  const Message second = Enter(*store, {"a"});
  const Message later_b = Enter(*store, {"b"});  // b is free, but `both` came first
  ASSERT_TRUE(first.started());
  EXPECT_FALSE(both.started() || second.started() || later_b.started());
  const Message over = Enter(*store, {"b", "a"});
  EXPECT_EQ(over.entered.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(over.entered.message(),
                       "entries[1].session_id: session 'a' has 2 steps waiting behind the one in "
                       "flight (at most 2, --max-pending-steps)"))
      << over.entered.message();
  store->FinishMessage(**first.hold);
  ASSERT_TRUE(both.started());
  EXPECT_FALSE(second.started() || later_b.started());
  store->FinishMessage(**both.hold);
  EXPECT_TRUE(second.started() && later_b.started());  // disjoint now: both run
  store->FinishMessage(**second.hold);
  store->FinishMessage(**later_b.hold);
  EXPECT_TRUE(Enter(*store, {"a", "b"}).started());
}

TEST_F(LlamaSessionsTest, PrepareKeepsTheLayersInOrder) {
  auto store = Store(16);
  ASSERT_TRUE(testing::OpenLlama(*store, 100, "a").ok());
  const Message held = Enter(*store, {"a"});
  ASSERT_TRUE(held.started());
  const LlamaSessions::Ptr& a = held.session();
  Status s = store->PrepareLayer(a, 1, 1, testing::Worker());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(s.message(), "layer 1 would hold 1 tokens, more than layer 0's 0"))
      << s.message();
  EXPECT_TRUE(store->PrepareLayer(a, 0, 3, testing::Worker()).ok());
  const Status too_many = store->PrepareLayer(a, 0, 101, testing::Worker());
  EXPECT_EQ(too_many.code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(Contains(too_many.message(), "max_tokens 100"));
  store->FinishMessage(**held.hold);
}

TEST_F(LlamaSessionsTest, ASessionClosedWhileHeldEndsNowAndGivesItsBlocksBackAfter) {
  auto store = Store(16);
  ASSERT_TRUE(testing::OpenLlama(*store, 100, "a").ok());
  ASSERT_TRUE(testing::OpenLlama(*store, 100, "b").ok());
  const Message held = Enter(*store, {"a"});
  const Message waiting = Enter(*store, {"b", "a"});
  const Message behind = Enter(*store, {"b"});  // waits for `waiting` at b
  ASSERT_TRUE(held.started());
  ASSERT_TRUE(store->Close("a").ok());
  // The message waiting for a is refused at once and leaves b's line: `behind` starts.
  EXPECT_EQ(waiting.refused->code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(waiting.refused->message(),
                       "entries[1].session_id: session 'a' was closed (CloseSession) (while this "
                       "step waited)"))
      << waiting.refused->message();
  EXPECT_FALSE(waiting.started());
  EXPECT_TRUE(behind.started());
  EXPECT_EQ(store->usage().sessions, 1);
  EXPECT_EQ(store->usage().blocks_used, 8);  // a's still held by the step that started
  const Status s = store->PrepareLayer(held.session(), 0, 1, testing::Worker());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(s.message(), "was closed (CloseSession) (while this step waited)"));
  store->FinishMessage(**held.hold);
  store->FinishMessage(**behind.hold);
  EXPECT_EQ(store->usage().blocks_used, 4);  // b's
}

TEST_F(LlamaSessionsTest, AFullPoolRefusesOrEvictsTheLeastRecentlyUsedIdleSession) {
  auto refuse = Store(8);  // two sessions' first blocks
  ASSERT_TRUE(testing::OpenLlama(*refuse, 100, "r1").ok());
  ASSERT_TRUE(testing::OpenLlama(*refuse, 100, "r2").ok());
  auto third = testing::OpenLlama(*refuse, 100, "r3");
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(third.status().message(), "needs 4 blocks, 0 of 8 free"));
  EXPECT_TRUE(Contains(third.status().message(), "128 bytes per token per layer"));

  auto evict = Store(8, KvFullPolicy::kEvictLru);
  ASSERT_TRUE(testing::OpenLlama(*evict, 100, "e1").ok());
  clock_.Advance(std::chrono::seconds(1));
  ASSERT_TRUE(testing::OpenLlama(*evict, 100, "e2").ok());
  const Message held = Enter(*evict, {"e2"});  // e2 is busy: e1 (idle, older) goes
  ASSERT_TRUE(held.started());
  ASSERT_TRUE(testing::OpenLlama(*evict, 100, "e3").ok());
  EXPECT_TRUE(Contains(evict->Close("e1").status().message(), "was evicted"));
  // Now e2 is held and e3 idle: e2's next block comes from e3.
  ASSERT_TRUE(evict->PrepareLayer(held.session(), 0, 4, testing::Worker()).ok());
  ASSERT_TRUE(evict->PrepareLayer(held.session(), 0, 5, testing::Worker()).ok());
  EXPECT_TRUE(Contains(evict->Close("e3").status().message(), "was evicted"));
  evict->FinishMessage(**held.hold);
}

TEST_F(LlamaSessionsTest, IdleSessionsExpireButHeldOnesDoNot) {
  auto store = Store(16);
  ASSERT_TRUE(testing::OpenLlama(*store, 100, "idle").ok());
  ASSERT_TRUE(testing::OpenLlama(*store, 100, "busy").ok());
  const Message held = Enter(*store, {"busy"});
  ASSERT_TRUE(held.started());
  clock_.Advance(std::chrono::seconds(61));
  store->SweepExpired();
  EXPECT_TRUE(Contains(store->Close("idle").status().message(), "expired: idle for more than"));
  store->FinishMessage(**held.hold);  // used now
  store->SweepExpired();
  EXPECT_TRUE(store->Close("busy").ok());
}

TEST_F(LlamaSessionsTest, UnloadingEndsEverySession) {
  auto store = Store(16);
  ASSERT_TRUE(testing::OpenLlama(*store, 100, "a").ok());
  store.reset();
  EXPECT_TRUE(Contains(directory_->NotFoundFor("a").message(),
                       "ended: its model 'llama' version 1 was unloaded or replaced"));
}

TEST_F(LlamaSessionsTest, UnloadingAnswersTheMessagesStillWaiting) {
  auto store = Store(16);
  ASSERT_TRUE(testing::OpenLlama(*store, 100, "a").ok());
  Message held = Enter(*store, {"a"});
  Message waiting = Enter(*store, {"a"});
  ASSERT_TRUE(held.started());
  ASSERT_FALSE(waiting.started());
  LlamaSessions::Hold hold = std::move(**held.hold);
  held.hold->reset();
  store.reset();  // the version is unloaded while one message runs and one waits
  EXPECT_FALSE(waiting.started());
  EXPECT_EQ(waiting.refused->code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(waiting.refused->message(), "entries[0].session_id: session ended"))
      << waiting.refused->message();
  EXPECT_TRUE(Contains(waiting.refused->message(), "was unloaded or replaced"));
}

TEST_F(LlamaSessionsTest, ForkAndTruncateRefuseUnknownBusyAndOutOfRangeTokens) {
  auto store = Store(16);
  ASSERT_TRUE(testing::OpenLlama(*store, 100, "a").ok());
  EXPECT_EQ(store->Fork("nope", 0, "", testing::Worker()).status().code(), StatusCode::kNotFound);
  const Status past = store->Truncate("a", 1, testing::Worker()).status();
  EXPECT_EQ(past.code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(Contains(past.message(),
                       "tokens: 1 is past the session's length (session 'a' "
                       "holds 0 tokens)"))
      << past.message();
  EXPECT_EQ(store->Fork("a", -1, "", testing::Worker()).status().code(),
            StatusCode::kInvalidArgument);
  const Message held = Enter(*store, {"a"});
  ASSERT_TRUE(held.started());
  const Status busy = store->Fork("a", 0, "b", testing::Worker()).status();
  EXPECT_EQ(busy.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(busy.message(),
                       "session 'a' has a step queued or running: fork after its "
                       "answer"));
  store->FinishMessage(**held.hold);
  auto fork = store->Fork("a", 0, "b", testing::Worker());
  ASSERT_TRUE(fork.ok()) << fork.status().ToString();
  EXPECT_EQ(fork->blocks, 0) << "an empty session's fork shares nothing";
  EXPECT_EQ(store->usage().sessions, 2);
}

// Three sessions of 6 tokens (2 blocks per layer, 8 in all) on a pool of 8 blocks: each step of a
// session restores it (spilling the least recently used other) and every layer's output equals
// the fixture's PyTorch row.
TEST_F(LlamaSessionsTest, SpillUnderATinyPoolRestoresEveryLayerExactly) {
  testing::TempDir dir;
  auto store = Store(8, KvFullPolicy::kSpill, dir.path());
  const testing::LlamaCase c = testing::LoadLlamaCase("stack4_sessions");
  const std::vector<std::string> ids = {"s0", "s1", "s2"};
  for (const std::string& id : ids) ASSERT_TRUE(testing::OpenLlama(*store, 100, id).ok());
  for (int64_t p = 0; p < 6; ++p) {
    for (const std::string& id : ids) {
      const Message m = Enter(*store, {id});
      ASSERT_TRUE(m.started());
      at::Tensor hidden = c.Io(id + ".input").narrow(0, p, 1);
      for (int64_t layer = 0; layer < 4; ++layer) {
        ASSERT_TRUE(store->PrepareLayer(m.session(), layer, 1, testing::Worker()).ok())
            << id << " token " << p;
        at::Tensor out;
        ASSERT_TRUE(
            StepSessions(*model_.stack, layer, {{m.session()->cache.get(), hidden, &out}}).ok());
        EXPECT_TRUE(
            testing::TensorsNear(out, c.Io(id + ".output." + std::to_string(layer)).narrow(0, p, 1),
                                 testing::kFp32Tolerance))
            << id << " token " << p << " layer " << layer;
        hidden = hidden + out;
      }
      store->FinishMessage(**m.hold);
    }
  }
  int64_t files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path())) {
    files += e.is_regular_file() ? 1 : 0;
  }
  EXPECT_EQ(files, 2 * 4) << "s0 and s1 are spilled: a file per layer each";
  for (const std::string& id : ids) {
    EXPECT_TRUE(store->Close(id).ok());
    EXPECT_FALSE(Contains(directory_->NotFoundFor(id).message(), "evicted")) << id;
  }
  EXPECT_EQ(store->usage().blocks_used, 0);
  store.reset();
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

}  // namespace
}  // namespace mha::serve
