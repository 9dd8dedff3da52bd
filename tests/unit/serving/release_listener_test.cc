// ReleaseListener (sessions/redis/release_listener.h) on a real redis-server: each message on its
// channel reaches the callback; after Redis restarts it subscribes again by itself; Stop ends it
// while it waits.
#include "server/serving/sessions/redis/release_listener.h"

#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "redis_server.h"
#include "wait.h"

namespace mha::serve {
namespace release_listener_test {

using testing::RedisServer;
using testing::WaitUntil;

class Heard {
 public:
  void Add(const std::string& s) {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_.push_back(s);
  }
  std::vector<std::string> Get() {
    std::lock_guard<std::mutex> lock(mu_);
    return sessions_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> sessions_;
};

TEST(ReleaseListener, EachRequestReachesTheCallbackAcrossARestart) {
  RedisServer redis;
  ASSERT_TRUE(redis.Start());
  RedisOptions options = redis.options();
  options.connect_timeout = std::chrono::milliseconds(20);  // resubscribe soon after the restart
  auto client = std::make_shared<RedisClient>(options);
  Heard heard;
  std::vector<std::string> statuses;
  std::mutex status_mu;
  ReleaseListener listener(
      client, "t:release:me", [&](const std::string& s) { heard.Add(s); },
      [&](const Status& s) {
        std::lock_guard<std::mutex> lock(status_mu);
        statuses.push_back(s.ok() ? "subscribed" : "lost");
      });
  ASSERT_TRUE(listener.WaitSubscribed(testing::kWaitTimeout));
  auto sent = redis.Command({"PUBLISH", "t:release:me", "s1"});
  ASSERT_TRUE(sent.ok());
  EXPECT_EQ(sent->integer, 1) << "one subscriber";
  ASSERT_TRUE(WaitUntil([&] { return heard.Get().size() == 1; }, "s1 heard"));

  ASSERT_TRUE(redis.Restart());
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto n = redis.Command({"PUBSUB", "NUMSUB", "t:release:me"});
        return n.ok() && n->elements.size() == 2 && n->elements[1].integer == 1;
      },
      "the listener to subscribe again"));
  ASSERT_TRUE(redis.Command({"PUBLISH", "t:release:me", "s2"}).ok());
  ASSERT_TRUE(WaitUntil([&] { return heard.Get().size() == 2; }, "s2 heard"));
  EXPECT_EQ(heard.Get(), (std::vector<std::string>{"s1", "s2"}));
  listener.Stop();
  std::lock_guard<std::mutex> lock(status_mu);
  ASSERT_GE(statuses.size(), 3u);
  EXPECT_EQ(statuses[0], "subscribed");
  EXPECT_EQ(statuses[1], "lost");
  EXPECT_EQ(statuses[2], "subscribed");
}

TEST(ReleaseListener, StopEndsItWhileRedisIsDown) {
  RedisServer redis;
  ASSERT_TRUE(redis.Start());
  auto client = std::make_shared<RedisClient>(redis.options());
  redis.Stop();
  ReleaseListener listener(client, "t:release:me", [](const std::string&) {});
  EXPECT_FALSE(listener.WaitSubscribed(std::chrono::milliseconds(1)));
  listener.Stop();  // returns: the retry wait is interrupted
}

}  // namespace release_listener_test
}  // namespace mha::serve
