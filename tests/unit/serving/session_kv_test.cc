// SessionKv (sessions/session_kv.h) through MultiheadSessions: two stores, each with its own KvTier
// (two replicas' owners), on one real redis-server. A session handed over (release on request,
// restore) decodes on exactly as in one process; with write-behind, a replica lost (its lease left
// to expire) costs the tail of the last block only, and the step says how many tokens the
// restored session holds; a session whose first record has not landed is handed over through its
// lease; a fork's shared blocks are stored once; a record of another version is
// DATA_LOSS naming the session; Redis down costs no step, and the store catches up when it returns.
#include "server/serving/sessions/session_kv.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>

#include "multihead_sessions_test_util.h"
#include "redis_server.h"
#include "wait.h"

namespace mha::serve {
namespace session_kv_test {

using testing::Contains;
using testing::RedisServer;
using testing::TensorsNear;
using testing::WaitUntil;
using namespace testing_sessions;  // NOLINT(build/namespaces)

// One replica: its tier (its own owner id), directory, runner and store.
struct Replica {
  std::shared_ptr<KvTier> tier;
  HeldRunner runner;
  std::unique_ptr<MultiheadSessions> store;

  Replica(const Fixture& f, const RedisServer& redis, bool write_behind, int64_t lease_ms = 30000,
          KvCacheDtype dtype = KvCacheDtype::kModel) {
    KvTierOptions kv;
    kv.url = redis.url();
    kv.write_behind = write_behind;
    kv.lease_ms = lease_ms;
    kv.handover_timeout_ms = 30000;
    auto made = KvTier::Create(kv);
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    tier = *made;
    SessionOptions o = Options(16);
    o.kv_tier = tier;
    o.pool.dtype = dtype;
    store = std::make_unique<MultiheadSessions>(
        o, RequestLimits{}, f.model, SessionLocation{"m", "1", "f1"},
        std::make_shared<SessionDirectory>(), &runner, nullptr);
  }
  StatusOr<SessionInfo> OpenAs(const std::string& id) {
    MHA_RETURN_IF_ERROR(store->Claim(id));
    return Open(*store, 2, 12, {}, {}, id);
  }
  // Step p of the fixture on session `id`, run at once: its answer.
  InferenceResult Step(const Fixture& f, const std::string& id, int64_t p, int64_t tokens = 1) {
    Answers answers;
    InferenceTask task;
    task.inputs.query = ToHost(f.c.inputs.query.narrow(1, p, tokens));
    store->Step(id, std::move(task), answers.Callback());
    if (answers.results.empty()) runner.RunOldest();
    EXPECT_EQ(answers.results.size(), 1u);
    return answers.results.empty() ? InferenceResult() : std::move(answers.results[0]);
  }
  void Flush() {
    ASSERT_TRUE(tier->queue().Flush(std::chrono::steady_clock::now() + testing::kWaitTimeout));
  }
};

void ExpectExact(const Fixture& f, const InferenceResult& r, int64_t p, int64_t tokens = 1) {
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_TRUE(
      TensorsNear(ToTensor(r.outputs.output), f.c.expected_output.narrow(1, p, tokens), 1e-5))
      << "token " << p;
}

TEST(SessionKv, AHandoverDecodesOnExactly) {
  const Fixture f = Load();
  RedisServer redis;
  ASSERT_TRUE(redis.Start());
  Replica a(f, redis, false), b(f, redis, false);
  ASSERT_TRUE(a.OpenAs("s").ok());
  for (int64_t p = 0; p < 6; ++p) ExpectExact(f, a.Step(f, "s", p), p);
  // b asks a (its release listener) to release it, then restores it: 6 tokens, one partial block.
  ASSERT_TRUE(b.store->Adopt("s", Worker()).ok());
  EXPECT_EQ(a.tier->counters().released, 1);
  EXPECT_EQ(b.tier->counters().restored, 1);
  EXPECT_EQ(b.tier->counters().restored_tokens, 6);
  EXPECT_EQ(b.tier->counters().lost_tokens, 0);
  for (int64_t p = 6; p < 12; ++p) ExpectExact(f, b.Step(f, "s", p), p);
  // On a, the session is gone, restorable (a call there would take it back).
  const InferenceResult stale = a.Step(f, "s", 6);
  EXPECT_EQ(stale.status.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(stale.status.message(), "moved to another replica"));
  auto closed = b.store->Close("s");
  ASSERT_TRUE(closed.ok());
  b.Flush();
  auto left = redis.Command({"DBSIZE"});
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(left->integer, 1) << "only the fencing counter is left after a close";
}

// An int8 cache travels as its codes and scales: the handed-over session answers exactly as one
// that never moved; a replica of another cache dtype refuses the record (DATA_LOSS naming it).
TEST(SessionKv, AnInt8CacheIsHandedOverAsItsCodesAndScales) {
  const Fixture f = Load();
  RedisServer redis;
  ASSERT_TRUE(redis.Start());
  Replica a(f, redis, false, 30000, KvCacheDtype::kInt8);
  Replica b(f, redis, false, 30000, KvCacheDtype::kInt8);
  Replica still(f, redis, false, 30000, KvCacheDtype::kInt8);
  Replica fp32(f, redis, false);
  ASSERT_TRUE(a.OpenAs("s").ok());
  ASSERT_TRUE(still.OpenAs("r").ok());
  for (int64_t p = 0; p < 6; ++p) {
    ASSERT_TRUE(a.Step(f, "s", p).status.ok());
    ASSERT_TRUE(still.Step(f, "r", p).status.ok());
  }
  const Status refused = fp32.store->Adopt("s", Worker());
  EXPECT_EQ(refused.code(), StatusCode::kDataLoss) << refused.ToString();
  EXPECT_TRUE(Contains(refused.message(), "of dtype 'int8', this replica serves 'float32'"))
      << refused.message();
  ASSERT_TRUE(b.store->Adopt("s", Worker()).ok());
  EXPECT_EQ(b.tier->counters().restored_tokens, 6);
  for (int64_t p = 6; p < 12; ++p) {
    const InferenceResult moved = b.Step(f, "s", p), stayed = still.Step(f, "r", p);
    ASSERT_TRUE(moved.status.ok()) << moved.status.ToString();
    ASSERT_TRUE(stayed.status.ok()) << stayed.status.ToString();
    EXPECT_TRUE(at::equal(ToTensor(moved.outputs.output), ToTensor(stayed.outputs.output)))
        << "token " << p;
  }
}

TEST(SessionKv, AReplicaLostWithWriteBehindCostsTheTailOfOneBlock) {
  const Fixture f = Load();
  RedisServer redis;
  ASSERT_TRUE(redis.Start());
  auto a = std::make_unique<Replica>(f, redis, true, 300);
  ASSERT_TRUE(a->OpenAs("s").ok());
  for (int64_t p = 0; p < 9; ++p) ExpectExact(f, a->Step(f, "s", p), p);  // 2 full blocks of 4
  a->Flush();
  a.reset();  // lost: nothing released, its lease left to expire
  Replica b(f, redis, true);
  ASSERT_TRUE(b.store->Adopt("s", Worker()).ok());
  EXPECT_EQ(b.tier->counters().restored_tokens, 8);
  const InferenceResult refused = b.Step(f, "s", 9);
  EXPECT_EQ(refused.status.code(), StatusCode::kAborted);
  EXPECT_TRUE(Contains(refused.status.message(), "[session_tokens=8]")) << refused.status.message();
  ExpectExact(f, b.Step(f, "s", 8), 8);  // the tail again
  for (int64_t p = 9; p < 12; ++p) ExpectExact(f, b.Step(f, "s", p), p);
}

TEST(SessionKv, AForksSharedBlocksAreStoredOnceAndBothRestoreExactly) {
  const Fixture f = Load();
  RedisServer redis;
  ASSERT_TRUE(redis.Start());
  Replica a(f, redis, true), b(f, redis, true);
  ASSERT_TRUE(a.OpenAs("s").ok());
  for (int64_t p = 0; p < 8; ++p) ExpectExact(f, a.Step(f, "s", p), p);
  ASSERT_TRUE(a.store->Claim("t").ok());
  ASSERT_TRUE(a.store->Fork("s", 6, "t", Worker()).ok());
  a.Flush();
  auto refs = redis.Command({"KEYS", "mha:ref:*"});
  ASSERT_TRUE(refs.ok());
  ASSERT_EQ(refs->elements.size(), 2u) << "s's two blocks; t names the first";
  std::multiset<long long> named;
  for (const auto& ref : refs->elements) {
    auto n = redis.Command({"SCARD", ref.str});
    ASSERT_TRUE(n.ok());
    named.insert(n->integer);
  }
  EXPECT_EQ(named, (std::multiset<long long>{1, 2})) << "one block named by both sessions";
  auto blocks = redis.Command({"KEYS", "mha:blk:*"});
  ASSERT_TRUE(blocks.ok());
  EXPECT_EQ(blocks->elements.size(), 2u) << "stored once";
  ASSERT_TRUE(b.store->Adopt("s", Worker()).ok());
  ASSERT_TRUE(b.store->Adopt("t", Worker()).ok());
  for (int64_t p = 8; p < 12; ++p) ExpectExact(f, b.Step(f, "s", p), p);
  for (int64_t p = 6; p < 12; ++p) ExpectExact(f, b.Step(f, "t", p), p);
}

// Two replicas without write-behind on one redis-server; session "s" opened on `a` and stepped
// once there.
struct SteppedOnA {
  const Fixture f = Load();
  RedisServer redis;
  std::unique_ptr<Replica> a, b;

  ::testing::AssertionResult Start() {
    if (!redis.Start()) return ::testing::AssertionFailure() << "redis-server did not start";
    a = std::make_unique<Replica>(f, redis, false);
    b = std::make_unique<Replica>(f, redis, false);
    if (!a->OpenAs("s").ok()) return ::testing::AssertionFailure() << "open on a failed";
    ExpectExact(f, a->Step(f, "s", 0), 0);
    return ::testing::AssertionSuccess();
  }
};

// An open writes its session's first record after it answers (through the write queue): a call
// on another replica before that record lands finds the lease, asks for the session and gets it.
TEST(SessionKv, ASessionWhoseFirstRecordHasNotLandedIsHandedOver) {
  SteppedOnA t;
  ASSERT_TRUE(t.Start());
  t.a->Flush();
  ASSERT_TRUE(t.redis.Command({"DEL", "mha:rec:s"}).ok());  // as if its write were still queued
  const Status adopted = t.b->store->Adopt("s", Worker());
  ASSERT_TRUE(adopted.ok()) << adopted.ToString();
  for (int64_t p = 1; p < 4; ++p) ExpectExact(t.f, t.b->Step(t.f, "s", p), p);
  EXPECT_EQ(t.b->store->Adopt("t", Worker()).code(), StatusCode::kNotFound)
      << "no lease, no record";
}

TEST(SessionKv, ARecordOfAnotherVersionIsDataLossNamingTheSession) {
  SteppedOnA t;
  ASSERT_TRUE(t.Start());
  RedisServer& redis = t.redis;
  Replica& a = *t.a;
  Replica& b = *t.b;
  const Status adopted = b.store->Adopt("s", Worker());  // released by a, restored by b
  ASSERT_TRUE(adopted.ok()) << adopted.ToString();
  ASSERT_TRUE(b.store->ReleaseForHandover("s"));
  auto text = redis.Command({"GET", "mha:rec:s"});
  ASSERT_TRUE(text.ok());
  std::string other = text->str;
  other.replace(other.find("fingerprint f1"), 14, "fingerprint f2");
  ASSERT_TRUE(redis.Command({"SET", "mha:rec:s", other}).ok());
  const Status refused = a.store->Adopt("s", Worker());
  EXPECT_EQ(refused.code(), StatusCode::kDataLoss) << refused.ToString();
  EXPECT_TRUE(Contains(refused.message(), "session 's'"));
  EXPECT_TRUE(Contains(refused.message(), "another model version (fingerprint) 'f2'"));
  ASSERT_TRUE(redis.Command({"SET", "mha:rec:s", "garbage"}).ok());
  EXPECT_EQ(a.store->Adopt("s", Worker()).code(), StatusCode::kDataLoss);
}

TEST(SessionKv, RedisDownCostsNoStepAndTheStoreCatchesUp) {
  const Fixture f = Load();
  RedisServer redis;
  ASSERT_TRUE(redis.Start());
  Replica a(f, redis, true, 300);
  ASSERT_TRUE(a.OpenAs("s").ok());
  ExpectExact(f, a.Step(f, "s", 0), 0);
  redis.Stop();
  for (int64_t p = 1; p < 9; ++p) ExpectExact(f, a.Step(f, "s", p), p);  // 2 blocks fill meanwhile
  a.Flush();
  EXPECT_GT(a.tier->store().counters().failed, 0);
  ASSERT_TRUE(redis.Restart());  // empty: no persistence
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto text = redis.Command({"GET", "mha:rec:s"});
        return text.ok() && text->type == RedisReply::Type::kString &&
               text->str.find("layer 8 ") != std::string::npos;
      },
      "the session written again after the outage"));
  Replica b(f, redis, true);
  ASSERT_TRUE(b.store->Adopt("s", Worker()).ok());
  for (int64_t p = 9; p < 12; ++p) ExpectExact(f, b.Step(f, "s", p), p);
}

}  // namespace session_kv_test
}  // namespace mha::serve
