// RedisClient (sessions/redis/redis_client.h): connections reused across calls and threads, a
// server lost and back (restart) reconnected, and while it is gone, calls that fail fast with the
// connect failure instead of each paying a connect timeout.
#include "server/serving/sessions/redis/redis_client.h"

#include <gtest/gtest.h>

#include <future>
#include <string>
#include <thread>
#include <vector>

#include "redis_server.h"
#include "wait.h"

namespace mha::serve {
namespace redis_client_test {

using testing::RedisServer;

// Connections the server has accepted since it started.
int64_t ConnectionsReceived(const RedisServer& redis) {
  auto info = redis.Command({"INFO", "stats"});
  if (!info.ok()) return -1;
  const std::string key = "total_connections_received:";
  const size_t at = info->str.find(key);
  return at == std::string::npos ? -1 : std::stoll(info->str.substr(at + key.size()));
}

TEST(RedisClient, ConnectionsAreReused) {
  RedisServer redis;
  ASSERT_TRUE(redis.Start());
  RedisClient client(redis.options());
  ASSERT_TRUE(client.Ping().ok());
  const int64_t before = ConnectionsReceived(redis);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(client.Command({"INCR", "n"}).ok());
  // Command() of the helper itself opens one connection per call: 1 for the second INFO.
  EXPECT_EQ(ConnectionsReceived(redis), before + 1) << "20 commands, no new connection";
}

TEST(RedisClient, ManyThreadsAtOnce) {
  RedisServer redis;
  ASSERT_TRUE(redis.Start());
  RedisClient client(redis.options(), 2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) EXPECT_TRUE(client.Command({"INCR", "n"}).ok());
    });
  }
  for (auto& t : threads) t.join();
  auto n = client.Command({"GET", "n"});
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->str, "400");
}

TEST(RedisClient, AServerGoneFailsFastThenComesBack) {
  RedisServer redis;
  ASSERT_TRUE(redis.Start());
  RedisOptions options = redis.options();
  options.connect_timeout = std::chrono::milliseconds(60000);  // a retry window no test outlives
  RedisClient client(options);
  ASSERT_TRUE(client.Command({"SET", "k", "v"}).ok());
  redis.Stop();
  // The pooled connection finds the server gone; the next call's connect is refused.
  Status first = client.Command({"GET", "k"}).status();
  if (first.ok() || first.message().find("refused") == std::string::npos) {
    first = client.Command({"GET", "k"}).status();
  }
  ASSERT_EQ(first.code(), StatusCode::kUnavailable) << first.ToString();
  EXPECT_NE(first.message().find("connection refused"), std::string::npos) << first.ToString();
  ASSERT_TRUE(redis.Restart());
  // Within the retry window, the failure is returned without a connect: the server being back
  // changes nothing yet.
  const Status fast = client.Command({"PING"}).status();
  EXPECT_EQ(fast.code(), StatusCode::kUnavailable);
  EXPECT_EQ(fast.message(), first.message());

  RedisOptions quick = redis.options();
  quick.connect_timeout = std::chrono::milliseconds(1);
  RedisClient retrying(quick);
  redis.Stop();
  EXPECT_FALSE(retrying.Ping().ok());
  ASSERT_TRUE(redis.Restart());
  EXPECT_TRUE(testing::WaitUntil([&] { return retrying.Ping().ok(); }, "a reconnect"));
}

}  // namespace redis_client_test
}  // namespace mha::serve
