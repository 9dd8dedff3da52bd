// WorkQueue (server/serving/scheduling/work_queue.h) with a toy planner, no model: every
// submitted item is answered exactly once (run, dropped, refused as the queue is full or
// stopped), also when many threads submit while it shuts down; a pass's items are what the
// planner planned; an item the planner holds back (it waits for a running pass) runs once that
// pass finished, on a free instance; the queue-depth gauge follows the queue.
#include "server/serving/scheduling/work_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "pass_gate.h"
#include "server/serving/caller_thread.h"
#include "server/serving/observability/stats_aggregator.h"

namespace mha::serve {
namespace {

// Items are (key, answer); a pass takes the oldest item and every later one with its key, except
// keys of a running pass (they wait for it).
struct ToyItem {
  int key = 0;
  Clock::time_point deadline = Clock::time_point::max();
  std::function<void(Status, int passes)> answer;
  CallerThread caller;  // the submitting thread (TakeCaller): may it run its pass?
};

struct ToyLog {
  std::mutex mu;
  std::vector<std::vector<int>> passes;          // the keys of each pass, in order run
  std::atomic<int> running{0}, most_running{0};  // passes in Run now, and the most at once
};

class ToyPlanner {
 public:
  using Item = ToyItem;
  using Running = std::vector<int>;
  static constexpr const char* kPass = "toy pass";
  static constexpr const char* kItems = "toys";

  explicit ToyPlanner(std::shared_ptr<ToyLog> log) : log_(std::move(log)) {}
  Clock::time_point Deadline(const Item& item) const { return item.deadline; }
  static CallerThread TakeCaller(Item& item) { return std::exchange(item.caller, CallerThread()); }
  bool Cancelled(const Item&) const { return false; }
  PassSize Alone(const Item&) const { return PassSize{false, 1}; }
  PassPlan<Item> PlanLocked(Queue<Item>& queue, Clock::time_point, const PassContext&) const {
    PassPlan<Item> plan;
    plan.full = true;
    for (auto it = queue.begin(); it != queue.end(); ++it) {
      if (running_.count(it->item.key)) continue;
      if (!plan.items.empty() && it->item.key != plan.items.front()->item.key) continue;
      plan.items.push_back(it);
    }
    return plan;
  }
  Running StartLocked(const std::vector<Queued<Item>>& batch) {
    Running keys;
    for (const auto& q : batch) keys.push_back(q.item.key);
    for (int k : keys) ++running_[k];
    return keys;
  }
  void FinishLocked(const Running& keys) {
    for (int k : keys) {
      if (--running_[k] == 0) running_.erase(k);
    }
  }
  void Run(std::vector<Queued<Item>>& batch, PassContext& context) const {
    const int now = ++log_->running;
    for (int most = log_->most_running.load(); now > most;) {
      if (log_->most_running.compare_exchange_weak(most, now)) break;
    }
    const Status status = context.RunPass([&] {
      std::lock_guard<std::mutex> lock(log_->mu);
      std::vector<int> keys;
      for (const auto& q : batch) keys.push_back(q.item.key);
      log_->passes.push_back(keys);
      return Status::Ok();
    });
    --log_->running;
    for (auto& q : batch) q.item.answer(status, static_cast<int>(batch.size()));
  }
  void Refuse(Queued<Item>& item, Status status, int64_t, PassContext&) const {
    item.item.answer(std::move(status), 0);
  }

 private:
  std::shared_ptr<ToyLog> log_;
  std::map<int, int> running_;  // keys of the running passes (the queue's lock)
};

struct Answer {
  Status status;
  int passes = 0;
  std::thread::id thread;  // that answered
};

std::future<Answer> Submit(WorkQueue<ToyPlanner>& queue, int key,
                           Clock::time_point deadline = Clock::time_point::max(),
                           CallerThread caller = CallerThread()) {
  auto promise = std::make_shared<std::promise<Answer>>();
  queue.Submit(ToyItem{key, deadline,
                       [promise](Status s, int n) {
                         promise->set_value(Answer{std::move(s), n, std::this_thread::get_id()});
                       },
                       caller});
  return promise->get_future();
}

std::future<Answer> SubmitInline(WorkQueue<ToyPlanner>& queue, int key,
                                 CallerThread::Hook hook = nullptr, void* arg = nullptr) {
  return Submit(queue, key, Clock::time_point::max(), CallerThread(true, hook, arg));
}

bool Ready(const std::future<Answer>& f) {
  return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

Answer Get(std::future<Answer>& f) { return testing::GetWithin(f, "the item's answer"); }

// A queue of one instance whose passes wait at a held gate (released when it goes, before the
// queue waits for its passes).
struct OneHeldInstance {
  static BatcherOptions Options(const testing::PassGate& gate) {
    BatcherOptions o;
    o.instances = 1;
    o.pass_hook = gate.Hook();
    return o;
  }
  OneHeldInstance() { gate.Hold(); }
  std::shared_ptr<ToyLog> log = std::make_shared<ToyLog>();
  testing::PassGate gate;
  WorkQueue<ToyPlanner> queue{ToyPlanner(log), Options(gate), "toy", nullptr};
  testing::ReleaseOnExit<testing::PassGate> release_on_exit{gate};
};

TEST(WorkQueueTest, HeldBackItemsRunAfterThePassTheyWaitForAndTheGaugeFollows) {
  auto log = std::make_shared<ToyLog>();
  testing::PassGate gate;
  BatcherOptions o;
  o.instances = 2;
  o.pass_hook = gate.Hook();
  StatsAggregator stats("toy", "1");
  WorkQueue<ToyPlanner> queue(ToyPlanner(log), o, "toy", &stats);
  const testing::ReleaseOnExit release_on_exit(gate);  // before the queue waits for its passes
  gate.Hold();
  auto first = Submit(queue, 7);
  ASSERT_TRUE(gate.WaitEntered(1)) << "the first pass never started";
  // Key 7 is running: both 7s wait although an instance is free; then they run in one pass.
  auto second = Submit(queue, 7), third = Submit(queue, 7);
  EXPECT_EQ(stats.Read().queue_depth, 2);
  gate.ReleaseAll();
  EXPECT_EQ(Get(first).passes, 1);
  EXPECT_EQ(Get(second).passes, 2);
  EXPECT_EQ(Get(third).passes, 2);
  queue.Shutdown();
  EXPECT_EQ(stats.Read().queue_depth, 0);
  EXPECT_EQ(log->passes, (std::vector<std::vector<int>>{{7}, {7, 7}}));
}

TEST(WorkQueueTest, EveryItemIsAnsweredOnceWhileManyThreadsSubmitAndItShutsDown) {
  auto log = std::make_shared<ToyLog>();
  BatcherOptions o;
  o.instances = 2;
  o.max_queue_size = 8;
  auto queue = std::make_unique<WorkQueue<ToyPlanner>>(ToyPlanner(log), o, "toy", nullptr);
  std::atomic<int> answered{0}, ok{0}, refused{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0; i < 200; ++i) {
        queue->Submit(ToyItem{(c + i) % 3, Clock::time_point::max(),
                              [&](Status s, int) {
                                ++answered;
                                ++(s.ok() ? ok : refused);
                              },
                              CallerThread()});
      }
    });
  }
  std::thread stopper([&] { queue->Shutdown(); });
  for (auto& t : clients) t.join();
  stopper.join();
  queue.reset();
  EXPECT_EQ(answered.load(), 800);
  EXPECT_EQ(ok.load() + refused.load(), 800);
  size_t ran = 0;
  for (const auto& pass : log->passes) ran += pass.size();
  EXPECT_EQ(ran, static_cast<size_t>(ok.load()));
}

TEST(WorkQueueTest, AnExpiredItemIsRefusedWithoutAPass) {
  auto log = std::make_shared<ToyLog>();
  WorkQueue<ToyPlanner> queue(ToyPlanner(log), BatcherOptions(), "toy", nullptr);
  auto expired = Submit(queue, 1, Clock::now() - std::chrono::seconds(1));
  const Answer a = Get(expired);
  EXPECT_EQ(a.status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(a.status.message().find("before the toy pass"), std::string::npos);
  queue.Shutdown();
  EXPECT_TRUE(log->passes.empty());
}

TEST(WorkQueueTest, AnIdleQueueRunsAnInlineItemsPassOnTheSubmittingThread) {
  auto log = std::make_shared<ToyLog>();
  WorkQueue<ToyPlanner> queue(ToyPlanner(log), BatcherOptions(), "toy", nullptr);
  auto here = SubmitInline(queue, 1);
  ASSERT_TRUE(Ready(here)) << "Submit returned before the inline pass answered";
  EXPECT_EQ(Get(here).thread, std::this_thread::get_id());
  auto queued = Submit(queue, 2);  // not allowed inline: a worker runs it
  EXPECT_NE(Get(queued).thread, std::this_thread::get_id());
  queue.Shutdown();
  EXPECT_EQ(log->passes, (std::vector<std::vector<int>>{{1}, {2}}));
}

TEST(WorkQueueTest, TheSubmittingThreadSaysItWillBlockBeforeAnInlinePassAndOnlyThen) {
  auto log = std::make_shared<ToyLog>();
  WorkQueue<ToyPlanner> queue(ToyPlanner(log), BatcherOptions(), "toy", nullptr);
  struct Seen {
    int calls = 0;
    size_t passes_before = 0;
    std::shared_ptr<ToyLog> log;
  };
  const CallerThread::Hook count = [](void* arg) {
    auto* s = static_cast<Seen*>(arg);
    ++s->calls;
    s->passes_before = s->log->passes.size();
  };
  Seen inline_seen{0, 0, log};
  {
    auto here = SubmitInline(queue, 1, count, &inline_seen);  // the queue is idle: runs here
    EXPECT_EQ(Get(here).thread, std::this_thread::get_id());
  }
  EXPECT_EQ(inline_seen.calls, 1);
  EXPECT_EQ(inline_seen.passes_before, 0u) << "told after the inline pass ran, not before";
  Seen queued_seen{0, 0, log};
  {
    // Not allowed inline: a worker runs it, this thread never blocks.
    auto queued =
        Submit(queue, 2, Clock::time_point::max(), CallerThread(false, count, &queued_seen));
    EXPECT_TRUE(Get(queued).status.ok());
  }
  EXPECT_EQ(queued_seen.calls, 0);
  queue.Shutdown();
  EXPECT_EQ(log->passes, (std::vector<std::vector<int>>{{1}, {2}}));
}

TEST(WorkQueueTest, AnInlineItemQueuesWhileEveryInstanceIsBusy) {
  OneHeldInstance held;
  const std::shared_ptr<ToyLog>& log = held.log;
  testing::PassGate& gate = held.gate;
  WorkQueue<ToyPlanner>& queue = held.queue;
  auto first = Submit(queue, 1);
  ASSERT_TRUE(gate.WaitEntered(1)) << "the worker's pass never started";
  // The one instance is busy: the inline item waits in the queue, Submit returns at once (had it
  // run here, this thread would wait at the held gate).
  auto second = SubmitInline(queue, 2);
  EXPECT_FALSE(Ready(second));
  EXPECT_EQ(queue.depth(), 1u);
  gate.ReleaseAll();
  EXPECT_TRUE(Get(first).status.ok());
  EXPECT_NE(Get(second).thread, std::this_thread::get_id());
  queue.Shutdown();
  EXPECT_EQ(log->passes, (std::vector<std::vector<int>>{{1}, {2}}));
}

// A pass's end wakes the workers only when they have something to do (RunTaken): an item that
// waited for the instance is such a thing.
TEST(WorkQueueTest, AnItemQueuedBehindAnInlinePassRunsWhenThatPassEnds) {
  OneHeldInstance held;
  const std::shared_ptr<ToyLog>& log = held.log;
  testing::PassGate& gate = held.gate;
  WorkQueue<ToyPlanner>& queue = held.queue;
  auto inline_answer = std::async(std::launch::async, [&queue] {
    auto here = SubmitInline(queue, 1);
    return Get(here);
  });
  ASSERT_TRUE(gate.WaitEntered(1)) << "the inline pass never started";
  auto queued = Submit(queue, 2);  // the one instance is busy: the worker waits for it
  EXPECT_FALSE(Ready(queued));
  gate.ReleaseAll();
  EXPECT_TRUE(testing::GetWithin(inline_answer, "the inline answer").status.ok());
  const Answer a = Get(queued);  // the worker was woken when the inline pass freed the instance
  EXPECT_TRUE(a.status.ok());
  queue.Shutdown();
  EXPECT_EQ(log->passes, (std::vector<std::vector<int>>{{1}, {2}}));
}

TEST(WorkQueueTest, InlineAndWorkerPassesTogetherNeverExceedTheInstances) {
  auto log = std::make_shared<ToyLog>();
  BatcherOptions o;
  o.instances = 2;
  o.pass_hook = [](const std::function<Status()>& pass) {
    for (int i = 0; i < 200; ++i) std::this_thread::yield();  // passes overlap if they may
    return pass();
  };
  WorkQueue<ToyPlanner> queue(ToyPlanner(log), o, "toy", nullptr);
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 6; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0; i < 200; ++i) {
        auto f = Submit(queue, (c + i) % 3, Clock::time_point::max(),
                        CallerThread(i % 2 == 0, nullptr, nullptr));
        if (Get(f).status.ok()) ++ok;
      }
    });
  }
  for (auto& t : clients) t.join();
  queue.Shutdown();
  EXPECT_EQ(ok.load(), 1200);
  EXPECT_LE(log->most_running.load(), 2);  // 3+ when an inline pass does not hold an instance
  EXPECT_GE(log->most_running.load(), 1);
}

}  // namespace
}  // namespace mha::serve
