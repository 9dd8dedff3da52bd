// CqQueue (server/frontends/common/cq_queue.h) with tags posted by grpc::Alarm, no calls: every
// tag is told once; one thread leads at a time and a tag that hands the lead on before it blocks
// (CallerThread) lets another thread take the next tag; a queue never started drains at Shutdown.
#include "server/frontends/common/cq_queue.h"

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "server/serving/scheduling/caller_thread.h"
#include "wait.h"

namespace mha::serve {
namespace {

// A tag that runs `fn` once its alarm fires (or is cancelled at shutdown: ok false).
class AlarmTag final : public CqQueue::Tag {
 public:
  explicit AlarmTag(std::function<void(bool)> fn) : fn_(std::move(fn)) {}
  void Post(CqQueue* queue) {
    queue->RequestWhileAccepting(
        [&] { alarm_.Set(queue->get(), std::chrono::system_clock::now(), this); });
  }
  void OnEvent(bool ok) override { fn_(ok); }

 private:
  std::function<void(bool)> fn_;
  grpc::Alarm alarm_;
};

class CqQueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;  // a server without ports: only to own the queue
    queue_.AddTo(&builder);
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_);
  }
  void TearDown() override {
    server_->Shutdown();
    queue_.Shutdown();
  }
  // Posts a tag that lives until the queue's threads ended (after TearDown).
  AlarmTag* Post(std::function<void(bool)> fn) {
    tags_.push_back(std::make_unique<AlarmTag>(std::move(fn)));
    tags_.back()->Post(&queue_);
    return tags_.back().get();
  }
  std::vector<std::unique_ptr<AlarmTag>> tags_;
  CqQueue queue_{CqQueue::Options{2}};
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(CqQueueTest, EveryTagIsToldOnceOnAQueueThread) {
  queue_.Start();
  std::mutex mu;
  std::multiset<int> told;
  std::set<std::thread::id> threads;
  for (int i = 0; i < 50; ++i) {
    Post([&, i](bool ok) {
      std::lock_guard<std::mutex> lock(mu);
      if (ok) told.insert(i);
      threads.insert(std::this_thread::get_id());
    });
  }
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        return told.size() == 50;
      },
      "every tag told"));
  std::lock_guard<std::mutex> lock(mu);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(told.count(i), 1u) << i;
  EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);
}

TEST_F(CqQueueTest, ATagThatHandsTheLeadOnLetsAnotherThreadTakeTheNext) {
  queue_.Start();
  ASSERT_TRUE(testing::WaitUntil([&] { return queue_.idle_threads() == 2; }, "both idle"));
  // Shared with the tags, which may outlive this body when it fails.
  struct State {
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    std::promise<bool> follower_seen, second_told;
  };
  auto state = std::make_shared<State>();
  // Released however the body ends, so that a failure does not leave a queue thread blocked.
  struct ReleaseOnExit {
    std::shared_ptr<State> state;
    ~ReleaseOnExit() { state->release.set_value(); }
  } release_on_exit{state};
  CqQueue* queue = &queue_;
  Post([state, queue](bool) {
    state->follower_seen.set_value(queue->follower_waiting());
    CallerThread::BeforeBlocking();  // the lead goes to the other thread
    state->released.wait();
  });
  auto seen = state->follower_seen.get_future();
  EXPECT_TRUE(testing::GetWithin(seen, "the first tag running"));
  Post([state](bool ok) { state->second_told.set_value(ok); });
  auto told = state->second_told.get_future();
  EXPECT_TRUE(testing::GetWithin(told, "the second tag, while the first blocks"));
}

TEST_F(CqQueueTest, NothingIsRequestedAfterShutdownAndANeverStartedQueueDrains) {
  server_->Shutdown();
  queue_.Shutdown();  // never started: drains on this thread
  bool ran = false;
  EXPECT_FALSE(queue_.RequestWhileAccepting([&] { ran = true; }));
  EXPECT_FALSE(ran);
  EXPECT_EQ(queue_.idle_threads(), 0);
}

}  // namespace
}  // namespace mha::serve
