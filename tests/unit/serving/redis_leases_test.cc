// RedisLeases (sessions/redis/redis_leases.h) on a real redis-server: one owner at a time, a new
// fencing token per ownership, renew and release only by the holder; Acquire of a session another
// replica holds asks it to release (its ReleaseListener answers; asked again until a listener
// hears, so one that subscribes late is asked too) and gets it, takes it once the
// lease of a holder that is gone expires, and gives up after the handover bound with a message
// naming the holder when nobody releases.
#include "server/serving/sessions/redis/redis_leases.h"

#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <mutex>
#include <string>

#include "redis_server.h"
#include "server/serving/sessions/redis/release_listener.h"
#include "wait.h"

namespace mha::serve {
namespace redis_leases_test {

using testing::GetWithin;
using testing::RedisServer;

class RedisLeasesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(redis_.Start());
    client_ = std::make_shared<RedisClient>(redis_.options());
  }
  std::unique_ptr<RedisLeases> Owner(
      const std::string& owner, std::chrono::milliseconds lease = std::chrono::seconds(30),
      std::chrono::milliseconds handover = std::chrono::seconds(30)) {
    return std::make_unique<RedisLeases>(client_, RedisLeaseOptions{"t:", owner, lease, handover});
  }

  RedisServer redis_;
  std::shared_ptr<RedisClient> client_;
};

TEST_F(RedisLeasesTest, OneOwnerAtATimeEachWithItsOwnToken) {
  auto a = Owner("a"), b = Owner("b");
  auto first = a->TryAcquire("s");
  ASSERT_TRUE(first.ok() && first->acquired) << first.status().ToString();
  auto again = a->TryAcquire("s");
  ASSERT_TRUE(again.ok() && again->acquired);
  EXPECT_EQ(again->lease.token, first->lease.token) << "the holder keeps its token";
  auto other = b->TryAcquire("s");
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->acquired);
  EXPECT_EQ(other->holder, "a");
  EXPECT_EQ(other->holder_token, first->lease.token);
  EXPECT_GT(other->expires_in.count(), 0);
  EXPECT_EQ(b->Renew({"s", "b", first->lease.token}).code(), StatusCode::kAborted);
  EXPECT_EQ(b->Release({"s", "b", first->lease.token}).code(), StatusCode::kAborted);
  ASSERT_TRUE(a->Renew(first->lease).ok());
  ASSERT_TRUE(a->Release(first->lease).ok());
  auto taken = b->TryAcquire("s");
  ASSERT_TRUE(taken.ok() && taken->acquired);
  EXPECT_GT(taken->lease.token, first->lease.token) << "a new ownership, a new fencing token";
  EXPECT_EQ(a->Release(first->lease).code(), StatusCode::kAborted) << "a stale lease";
  auto renewed = b->RenewAll({taken->lease, first->lease});
  ASSERT_TRUE(renewed.ok());
  EXPECT_TRUE((*renewed)[0].ok());
  EXPECT_EQ((*renewed)[1].code(), StatusCode::kAborted);
}

TEST_F(RedisLeasesTest, TheHolderReleasesWhenAsked) {
  auto a = Owner("a"), b = Owner("b");
  auto held = a->TryAcquire("s");
  ASSERT_TRUE(held.ok() && held->acquired);
  std::promise<std::string> asked;
  ReleaseListener listener(client_, a->Channel("a"), [&](const std::string& session) {
    EXPECT_TRUE(a->Release(held->lease).ok());
    asked.set_value(session);
  });
  ASSERT_TRUE(listener.WaitSubscribed(testing::kWaitTimeout));
  auto lease =
      GetWithin(std::async(std::launch::async, [&] { return b->Acquire("s"); }), "a handover");
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(lease->owner, "b");
  EXPECT_EQ(GetWithin(asked.get_future()), "s");
}

TEST_F(RedisLeasesTest, AHolderThatSubscribesAfterTheRequestIsAskedAgain) {
  // A request PUBLISHed while the holder's listener is not subscribed (a replica starting, or
  // reconnecting to Redis) reaches nobody: the asker asks again until a subscriber hears it.
  auto a = Owner("a"), b = Owner("b", std::chrono::seconds(30), std::chrono::seconds(20));
  auto held = a->TryAcquire("s");
  ASSERT_TRUE(held.ok() && held->acquired);
  auto lease = std::async(std::launch::async, [&] { return b->Acquire("s"); });
  // b has asked (PUBLISH precedes the wait) and waits for a release: BLPOP on its connection.
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        auto clients = client_->Command({"CLIENT", "LIST"});
        return clients.ok() && clients->str.find("cmd=blpop") != std::string::npos;
      },
      "b to wait for a release"));
  std::promise<std::string> asked;
  std::once_flag once;
  ReleaseListener listener(client_, a->Channel("a"), [&](const std::string& session) {
    std::call_once(once, [&] {
      EXPECT_TRUE(a->Release(held->lease).ok());
      asked.set_value(session);
    });
  });
  auto got = GetWithin(std::move(lease), "a handover to a listener that subscribed late");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->owner, "b");
  EXPECT_EQ(GetWithin(asked.get_future()), "s");
}

TEST_F(RedisLeasesTest, AGoneHoldersLeaseIsTakenWhenItExpires) {
  // "a" holds a short lease and has no listener (a replica that was SIGKILLed).
  auto a = Owner("a", std::chrono::milliseconds(300));
  auto b = Owner("b");
  ASSERT_TRUE(a->TryAcquire("s").ok());
  auto lease = GetWithin(std::async(std::launch::async, [&] { return b->Acquire("s"); }),
                         "the lease's expiry");
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(lease->owner, "b");
}

TEST_F(RedisLeasesTest, NobodyReleasingIsUnavailableNamingTheHolderAfterTheBound) {
  auto a = Owner("a");
  auto b = Owner("b", std::chrono::seconds(30), std::chrono::milliseconds(200));
  ASSERT_TRUE(a->TryAcquire("s").ok());
  // A listener that hears the request and does not release (a stuck holder).
  std::promise<void> heard;
  ReleaseListener deaf(client_, a->Channel("a"), [&](const std::string&) { heard.set_value(); });
  ASSERT_TRUE(deaf.WaitSubscribed(testing::kWaitTimeout));
  auto lease = GetWithin(std::async(std::launch::async, [&] { return b->Acquire("s"); }),
                         "the handover's bound");
  ASSERT_FALSE(lease.ok());
  EXPECT_EQ(lease.status().code(), StatusCode::kUnavailable);
  const std::string& m = lease.status().message();
  EXPECT_NE(m.find("session 's' is held by replica 'a'"), std::string::npos) << m;
  EXPECT_NE(m.find("--kv-store-handover-timeout-ms 200"), std::string::npos) << m;
  EXPECT_NE(m.find("its lease expires in"), std::string::npos) << m;
  GetWithin(heard.get_future(), "the release request");
}

TEST_F(RedisLeasesTest, RedisDownIsTheStoresError) {
  auto a = Owner("a");
  redis_.Stop();
  auto attempt = a->TryAcquire("s");
  ASSERT_FALSE(attempt.ok());
  EXPECT_EQ(attempt.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(a->Acquire("s").status().code(), StatusCode::kUnavailable);
}

// A lease that vanished (Redis restarted empty, or it expired while Redis was away) is taken back
// by its holder's renew, unless another replica wrote the session since (then it is fenced).
TEST_F(RedisLeasesTest, ALostLeaseIsTakenBackOnlyWhenNobodyWroteTheSessionSince) {
  auto a = Owner("a");
  auto held = a->TryAcquire("s");
  ASSERT_TRUE(held.ok() && held->acquired);
  ASSERT_TRUE(redis_.Command({"DEL", "t:lease:s"}).ok());
  ASSERT_TRUE(a->Renew(held->lease).ok());
  auto again = Owner("b")->TryAcquire("s");
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->acquired) << "a holds it again";
  ASSERT_TRUE(redis_.Command({"DEL", "t:lease:s"}).ok());
  ASSERT_TRUE(redis_.Command({"SET", "t:owner:s", "b 99"}).ok());  // b wrote it meanwhile
  EXPECT_EQ(a->Renew(held->lease).code(), StatusCode::kAborted);
}

TEST(OwnerId, UniquePerCall) { EXPECT_NE(NewOwnerId(), NewOwnerId()); }

}  // namespace redis_leases_test
}  // namespace mha::serve
