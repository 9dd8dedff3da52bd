// RedisKvStore (sessions/redis/redis_kv_store.h) on a real redis-server: blocks stored and read
// back byte for byte (DATA_LOSS naming the session when missing or of the wrong size); records
// written only under the session's lease (fencing); a fork's shared blocks stored once and
// deleted only when no session names them; TTLs that follow the idle timeout; writes refused at
// maxmemory counted, nothing crashing.
#include "server/serving/sessions/redis/redis_kv_store.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "redis_server.h"

namespace mha::serve {
namespace redis_kv_store_test {

using testing::RedisServer;

class RedisKvStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(redis_.Start());
    Make(std::chrono::milliseconds(600000));
  }
  void Make(std::chrono::milliseconds ttl) {
    client_ = std::make_shared<RedisClient>(redis_.options());
    store_ = std::make_unique<RedisKvStore>(client_, RedisKvStoreOptions{"t:", ttl});
    leases_ = std::make_unique<RedisLeases>(client_, RedisLeaseOptions{"t:", "me"});
  }
  SessionLease Lease(const std::string& session) {
    auto a = leases_->TryAcquire(session);
    EXPECT_TRUE(a.ok() && a->acquired);
    return a.ok() ? a->lease : SessionLease{};
  }
  // A one-layer record of `tokens` tokens in `blocks` (block_tokens 2, 1 row, 1 x 1 float32).
  static SessionRecord Record(const std::string& id, int64_t tokens,
                              std::vector<std::string> blocks) {
    SessionRecord r;
    r.session_id = id;
    r.model = "m";
    r.version = "1";
    r.fingerprint = "f";
    r.kind = "multihead";
    r.dtype = "float32";
    r.rows = r.heads = r.head_dim = 1;
    r.dtype_bytes = 4;
    r.block_tokens = 2;
    r.tokens = tokens;
    r.layers = {{tokens, std::move(blocks)}};
    return r;
  }
  bool Exists(const std::string& key) {
    auto r = redis_.Command({"EXISTS", key});
    return r.ok() && r->integer == 1;
  }
  int64_t Ttl(const std::string& key) {
    auto r = redis_.Command({"PTTL", key});
    return r.ok() ? r->integer : -3;
  }

  RedisServer redis_;
  std::shared_ptr<RedisClient> client_;
  std::unique_ptr<RedisKvStore> store_;
  std::unique_ptr<RedisLeases> leases_;
};

TEST_F(RedisKvStoreTest, BlocksComeBackByteForByte) {
  const std::string bytes("\x01\x00\x02\x00\xff\xfe\x00\x80", 8);
  const std::string key = store_->NewBlockKey("s", 7);
  EXPECT_EQ(key.rfind("s.7.", 0), 0u);
  EXPECT_NE(store_->NewBlockKey("s", 7), key) << "keys are never reused";
  ASSERT_TRUE(store_->PutBlock(key, bytes.data(), 8).ok());
  auto back = store_->GetBlock("s", key, 8);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, bytes);
  auto wrong = store_->GetBlock("s", key, 16);
  EXPECT_EQ(wrong.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(wrong.status().message().find("session 's': its block '" + key + "' holds 8 bytes"),
            std::string::npos)
      << wrong.status().message();
  auto missing = store_->GetBlock("s", "nope", 8);
  EXPECT_EQ(missing.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(missing.status().message().find("not in the store"), std::string::npos);
  const auto c = store_->counters();
  EXPECT_EQ(c.blocks_written, 1);
  EXPECT_EQ(c.bytes_written, 8);
  EXPECT_EQ(c.blocks_read, 1);
}

TEST_F(RedisKvStoreTest, ManyBlocksInOneRoundTrip) {
  ASSERT_TRUE(store_->PutBlocks({{"p1", "aaaa"}, {"p2", std::string("b\0b", 3)}}).ok());
  auto back = store_->GetBlocks("s", {"p1", "p2"}, {4, 3});
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ((*back)[0], "aaaa");
  EXPECT_EQ((*back)[1], std::string("b\0b", 3));
  EXPECT_EQ(store_->counters().blocks_written, 2);
  auto short_one = store_->GetBlocks("s", {"p1", "p2"}, {4, 4});
  EXPECT_EQ(short_one.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(short_one.status().message().find("'p2' holds 3 bytes"), std::string::npos);
}

TEST_F(RedisKvStoreTest, ARecordIsWrittenOnlyUnderItsLease) {
  const SessionLease mine = Lease("s");
  ASSERT_TRUE(store_->PutBlock("b1", "12345678", 8).ok());
  ASSERT_TRUE(store_->WriteRecord(mine, Record("s", 2, {"b1"}), {}).ok());
  auto text = store_->ReadRecord("s");
  ASSERT_TRUE(text.ok());
  auto decoded = DecodeSessionRecord("s", *text, {"m", "f", "multihead", "float32", 1, 1, 1});
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->layers[0].blocks, std::vector<std::string>{"b1"});

  SessionLease stale = mine;
  stale.token += 100;
  const Status fenced = store_->WriteRecord(stale, Record("s", 0, {}), {});
  EXPECT_EQ(fenced.code(), StatusCode::kAborted) << fenced.ToString();
  EXPECT_NE(fenced.message().find("FENCED"), std::string::npos);
  EXPECT_EQ(store_->RemoveSession(stale, {"b1"}).code(), StatusCode::kAborted);
  EXPECT_TRUE(Exists("t:blk:b1")) << "a fenced write changes nothing";
  EXPECT_EQ(store_->counters().failed, 2);

  const Status missing = store_->WriteRecord(mine, Record("s", 4, {"b1", "b2"}), {});
  EXPECT_EQ(missing.code(), StatusCode::kDataLoss) << missing.ToString();
  EXPECT_EQ(store_->ReadRecord("nobody").status().code(), StatusCode::kNotFound);
}

TEST_F(RedisKvStoreTest, AForksSharedBlocksAreStoredOnceAndOutliveTheSource) {
  const SessionLease a = Lease("a"), b = Lease("b");
  for (const char* k : {"x1", "x2", "y2"}) ASSERT_TRUE(store_->PutBlock(k, "12345678", 8).ok());
  ASSERT_TRUE(store_->WriteRecord(a, Record("a", 4, {"x1", "x2"}), {}).ok());
  // b forked a's first 3 tokens: x1 shared, its own copy of the partly shared block.
  ASSERT_TRUE(store_->WriteRecord(b, Record("b", 4, {"x1", "y2"}), {}).ok());
  auto refs = redis_.Command({"SCARD", "t:ref:x1"});
  ASSERT_TRUE(refs.ok());
  EXPECT_EQ(refs->integer, 2) << "one block, named by two sessions";
  ASSERT_TRUE(store_->RemoveSession(a, {"x1", "x2"}).ok());
  EXPECT_TRUE(Exists("t:owner:b")) << "who wrote b last";
  EXPECT_FALSE(Exists("t:rec:a"));
  EXPECT_FALSE(Exists("t:lease:a"));
  EXPECT_FALSE(Exists("t:owner:a"));
  EXPECT_FALSE(Exists("t:blk:x2")) << "named by a only";
  EXPECT_TRUE(Exists("t:blk:x1")) << "b still names it";
  // b truncated to 2 tokens: y2 dropped.
  ASSERT_TRUE(store_->WriteRecord(b, Record("b", 2, {"x1"}), {"y2"}).ok());
  EXPECT_FALSE(Exists("t:blk:y2"));
  ASSERT_TRUE(store_->RemoveSession(b, {"x1"}).ok());
  EXPECT_FALSE(Exists("t:blk:x1"));
  EXPECT_FALSE(Exists("t:ref:x1"));
}

TEST_F(RedisKvStoreTest, TtlsFollowTheIdleTimeout) {
  const SessionLease s = Lease("s");
  ASSERT_TRUE(store_->PutBlock("b", "12345678", 8).ok());
  ASSERT_TRUE(store_->WriteRecord(s, Record("s", 2, {"b"}), {}).ok());
  for (const char* key : {"t:rec:s", "t:blk:b", "t:ref:b"}) {
    const int64_t ttl = Ttl(key);
    EXPECT_GT(ttl, 0) << key;
    EXPECT_LE(ttl, 600000) << key;
  }
  Make(std::chrono::milliseconds(0));
  const SessionLease n = Lease("n");
  ASSERT_TRUE(store_->PutBlock("c", "12345678", 8).ok());
  ASSERT_TRUE(store_->WriteRecord(n, Record("n", 2, {"c"}), {}).ok());
  EXPECT_EQ(Ttl("t:rec:n"), -1) << "--session-idle-timeout-s 0: never expires";
  EXPECT_EQ(Ttl("t:blk:c"), -1);
}

TEST(RedisKvStoreFull, WritesRefusedAtMaxmemoryAreCountedAndNothingCrashes) {
  RedisServer redis;
  ASSERT_TRUE(redis.Start({"", 2 << 20}));
  auto client = std::make_shared<RedisClient>(redis.options());
  RedisKvStore store(client, {});
  const std::string block(256 << 10, 'k');
  int64_t refused = 0;
  for (int i = 0; i < 32; ++i) {
    const Status s = store.PutBlock(store.NewBlockKey("s", 1), block.data(), block.size());
    if (!s.ok()) {
      EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_EQ(store.counters().refused_full, refused);
  EXPECT_GT(store.counters().blocks_written, 0);
  EXPECT_TRUE(client->Ping().ok());
}

}  // namespace redis_kv_store_test
}  // namespace mha::serve
