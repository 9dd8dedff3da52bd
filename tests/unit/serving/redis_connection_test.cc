// RedisConnection (sessions/redis/redis_connection.h) against a real redis-server: binary-safe
// commands, pipelines, and every failure as a Status that names the server, within its bound:
// nothing listening, a server that never answers (paused), a wrong or missing password, a write
// refused at maxmemory. Bounds are failure guards here, never speed assertions: a refused connect
// or a timed-out command must come back at all (not hang), which WaitFor's future proves.
#include "server/serving/sessions/redis/redis_connection.h"

#include <gtest/gtest.h>

#include <future>
#include <string>

#include "redis_server.h"
#include "wait.h"

namespace mha::serve {
namespace redis_connection_test {

using testing::GetWithin;
using testing::RedisServer;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(RedisConnection, BinarySafeCommandsAndPipelines) {
  RedisServer redis;
  ASSERT_TRUE(redis.Start());
  auto conn = RedisConnection::Connect(redis.options());
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  const std::string bytes("a\0b\r\n\xff", 6);
  ASSERT_TRUE((*conn)->Command({"SET", "k", bytes}).ok());
  auto got = (*conn)->Command({"GET", "k"});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->type, RedisReply::Type::kString);
  EXPECT_EQ(got->str, bytes);
  auto missing = (*conn)->Command({"GET", "nothing"});
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->type, RedisReply::Type::kNil);
  auto replies = (*conn)->Pipeline({{"INCR", "n"}, {"INCR", "n"}, {"LPUSH", "k", "x"}});
  ASSERT_TRUE(replies.ok());
  ASSERT_EQ(replies->size(), 3u);
  EXPECT_EQ((*replies)[1]->integer, 2);
  EXPECT_EQ((*replies)[2].status().code(), StatusCode::kInternal) << "WRONGTYPE";
  EXPECT_FALSE((*conn)->broken()) << "an error reply leaves the connection usable";
}

TEST(RedisConnection, TheDatabaseOfTheUrlIsSelected) {
  RedisServer redis;
  ASSERT_TRUE(redis.Start());
  auto db2 = RedisConnection::Connect(redis.options(2));
  ASSERT_TRUE(db2.ok()) << db2.status().ToString();
  ASSERT_TRUE((*db2)->Command({"SET", "only-in-2", "1"}).ok());
  auto db0 = redis.Command({"EXISTS", "only-in-2"});
  ASSERT_TRUE(db0.ok());
  EXPECT_EQ(db0->integer, 0);
}

TEST(RedisConnection, NothingListeningIsUnavailableNamingTheAddress) {
  RedisServer redis;
  ASSERT_TRUE(redis.Start());
  const RedisOptions options = redis.options();
  redis.Stop();
  auto conn =
      GetWithin(std::async(std::launch::async, [&] { return RedisConnection::Connect(options); }),
                "a refused connect");
  ASSERT_FALSE(conn.ok());
  EXPECT_EQ(conn.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(conn.status().message(), options.address.Describe()));
  EXPECT_TRUE(Contains(conn.status().message(), "connection refused")) << conn.status().message();
}

TEST(RedisConnection, AServerThatNeverAnswersIsDeadlineExceededAndTheConnectionBroken) {
  RedisServer redis;
  ASSERT_TRUE(redis.Start());
  RedisOptions options = redis.options();
  options.command_timeout = std::chrono::milliseconds(200);
  auto conn = RedisConnection::Connect(options);
  ASSERT_TRUE(conn.ok());
  redis.Pause();
  auto reply = GetWithin(std::async(std::launch::async, [&] { return (*conn)->Command({"PING"}); }),
                         "a command to a paused server");
  redis.Resume();
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), StatusCode::kDeadlineExceeded) << reply.status().ToString();
  EXPECT_TRUE(Contains(reply.status().message(), "--kv-store-timeout-ms 200"));
  EXPECT_TRUE((*conn)->broken());
  EXPECT_EQ((*conn)->Command({"PING"}).status().code(), StatusCode::kUnavailable);
}

TEST(RedisConnection, AWrongOrMissingPasswordIsUnauthenticatedAndNeverEchoed) {
  RedisServer redis;
  ASSERT_TRUE(redis.Start({"right-pass"}));
  RedisOptions wrong = redis.options();
  wrong.password = "wrong-pass";
  auto refused = RedisConnection::Connect(wrong);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnauthenticated) << refused.status().ToString();
  EXPECT_FALSE(Contains(refused.status().message(), "wrong-pass"));
  EXPECT_TRUE(Contains(refused.status().message(), "--kv-store-password-file"));
  RedisOptions none = redis.options();
  none.password.clear();
  auto anonymous = RedisConnection::Connect(none);
  ASSERT_TRUE(anonymous.ok()) << "AUTH is only sent when a password is set";
  EXPECT_EQ((*anonymous)->Command({"GET", "k"}).status().code(), StatusCode::kUnauthenticated);
  auto right = RedisConnection::Connect(redis.options());
  ASSERT_TRUE(right.ok()) << right.status().ToString();
  EXPECT_TRUE((*right)->Command({"PING"}).ok());
}

TEST(RedisConnection, AWriteRefusedAtMaxmemoryIsResourceExhausted) {
  RedisServer redis;
  ASSERT_TRUE(redis.Start({"", 2 << 20}));
  auto conn = RedisConnection::Connect(redis.options());
  ASSERT_TRUE(conn.ok());
  const std::string block(256 << 10, 'x');
  Status refused;
  for (int i = 0; i < 64 && refused.ok(); ++i) {
    auto r = (*conn)->Command({"SET", "b" + std::to_string(i), block});
    if (!r.ok()) refused = r.status();
  }
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused.ToString();
  EXPECT_TRUE(Contains(refused.message(), "maxmemory"));
  EXPECT_FALSE((*conn)->broken());
  EXPECT_TRUE((*conn)->Command({"GET", "b0"}).ok()) << "reads still answered";
}

TEST(RedisConnection, InterruptEndsABlockedRead) {
  RedisServer redis;
  ASSERT_TRUE(redis.Start());
  auto conn = RedisConnection::Connect(redis.options());
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE((*conn)->Send({"SUBSCRIBE", "c"}).ok());
  auto subscribed = (*conn)->Read(true);
  ASSERT_TRUE(subscribed.ok());
  auto read = std::async(std::launch::async, [&] { return (*conn)->Read(true); });
  (*conn)->Interrupt();
  auto ended = GetWithin(std::move(read), "the interrupted read");
  EXPECT_EQ(ended.status().code(), StatusCode::kUnavailable) << ended.status().ToString();
}

TEST(RedisErrorStatus, EachKindOfErrorItsCode) {
  EXPECT_EQ(RedisErrorStatus("a", "NOAUTH Authentication required.").code(),
            StatusCode::kUnauthenticated);
  EXPECT_EQ(RedisErrorStatus("a", "WRONGPASS invalid").code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(RedisErrorStatus("a", "OOM command not allowed").code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(RedisErrorStatus("a", "LOADING Redis is loading").code(), StatusCode::kUnavailable);
  EXPECT_EQ(RedisErrorStatus("a", "ERR user_script:3: FENCED x").code(), StatusCode::kAborted);
  EXPECT_EQ(RedisErrorStatus("a", "ERR unknown command").code(), StatusCode::kInternal);
  EXPECT_TRUE(Contains(RedisErrorStatus("redis://h:1/0", "ERR x").message(), "redis://h:1/0"));
}

}  // namespace redis_connection_test
}  // namespace mha::serve
