// What the MultiheadSessions tests share (multihead_sessions_test.cc,
// multihead_sessions_branch_test.cc): a
// runner that holds every submitted step until the test runs it, the decode_causal fixture, its
// steps, the answers and a small pool's options.
#pragma once

#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "mha/tensor_adapter.h"
#include "server/serving/kinds/multihead/merge/pass_runner.h"
#include "server/serving/kinds/multihead/multihead_sessions.h"
#include "server/serving/kinds/multihead/session_step.h"
#include "test_util.h"

namespace mha::serve {
namespace testing_sessions {

// Holds each submitted task; RunOldest computes it for real (DecodeStep) and answers it.
class HeldRunner final : public ModelRunner {
 public:
  void Submit(InferenceTask task, DoneCallback done) override {
    std::lock_guard<std::mutex> lock(mu_);
    held_.push_back({std::move(task), std::move(done)});
  }
  void Shutdown() override {}
  size_t queue_depth() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return held_.size();
  }
  void RunOldest() {
    std::pair<InferenceTask, DoneCallback> next;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ASSERT_FALSE(held_.empty());
      next = std::move(held_.front());
      held_.pop_front();
    }
    InferenceResult result;
    // The step alone, as a scheduler runs it: DecodeStep on its cache, the answer on the host.
    result.status =
        MakeModelPassRunner(next.first.step->model)->RunOne(next.first, &result.outputs);
    next.first = InferenceTask();
    next.second(std::move(result));
  }

 private:
  mutable std::mutex mu_;
  std::deque<std::pair<InferenceTask, DoneCallback>> held_;
};

struct Fixture {
  testing::FixtureCase c;
  std::shared_ptr<const MhaModel> model;
};

inline Fixture Load() {
  Fixture f;
  auto c = testing::LoadFixtureCase("decode_causal");  // E=32 H=4 B=2 T=12, 256 B per token
  EXPECT_TRUE(c.ok());
  f.c = *c;
  f.model = testing::LoadCaseModel(f.c);
  return f;
}

inline InferenceTask StepTask(const Fixture& f, int64_t p) {
  InferenceTask task;
  task.inputs.query = ToHost(f.c.inputs.query.narrow(1, p, 1));
  return task;
}

struct Answers {
  std::mutex mu;
  std::vector<InferenceResult> results;
  DoneCallback Callback() {
    return [this](InferenceResult r) {
      std::lock_guard<std::mutex> lock(mu);
      results.push_back(std::move(r));
    };
  }
};

// The caller of a session call in these tests: a thread that may block freely.
inline CallerThread& Worker() {
  static thread_local CallerThread worker;
  return worker;
}

// Opens a session of `batch_size` rows and `max_tokens` tokens (with key and value: a
// cross-attention one) under `id` ("" = a new one).
inline StatusOr<SessionInfo> Open(MultiheadSessions& store, int64_t batch_size, int64_t max_tokens,
                                  HostTensor key = {}, HostTensor value = {},
                                  const std::string& id = "") {
  OpenSessionRequest r;
  r.batch_size = batch_size;
  r.max_tokens = max_tokens;
  r.key = std::move(key);
  r.value = std::move(value);
  r.session_id = id;
  return store.Open(r, Worker());
}

inline SessionOptions Options(int64_t blocks, KvFullPolicy policy = KvFullPolicy::kRefuse) {
  SessionOptions o;
  o.pool = KvPoolOptions{blocks * 4 * 256, 4};
  o.full_policy = policy;
  o.max_pending_steps = 2;
  return o;
}

}  // namespace testing_sessions
}  // namespace mha::serve
