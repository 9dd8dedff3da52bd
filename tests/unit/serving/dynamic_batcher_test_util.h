// The fakes of the DynamicBatcher tests (dynamic_batcher_test.cc): a forward function that can be
// held at the in-process hold gate (and waited for, without polling), a collector of answers, tasks
// filled with their id.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <vector>

#include "mha/tensor_adapter.h"
#include "pass_gate.h"
#include "server/serving/kinds/multihead/dynamic_batcher.h"

namespace mha::serve::batcher_testing {

using namespace std::chrono_literals;

constexpr int64_t kEmbed = 4;

// A forward pass that returns 2 * query, records each call's shape and can be held at a gate.
class FakeModel {
 public:
  Status Forward(const ForwardInputs& in, ForwardOutputs* out) {
    if (in.query.dim() != 3) return InvalidArgument("query: expected rank 3");
    {
      std::lock_guard<std::mutex> lock(mu_);
      calls_.push_back({in.query.size(0), in.query.size(1), in.query.max().item<float>()});
      called_.notify_all();
    }
    gate_.Enter();
    if (at::isnan(in.query).any().item<bool>()) return Internal("poisoned input");
    out->output = in.query * 2;
    if (in.need_weights) out->attn_weights = at::zeros({in.query.size(0), in.query.size(1), 1});
    return Status::Ok();
  }
  BatchForwardFn Fn() {
    return [this](const ForwardInputs& in, ForwardOutputs* out) { return Forward(in, out); };
  }
  // Passes from now on wait at the gate (tests/common/pass_gate.h) until Release.
  void Hold() { gate_.Hold(); }
  void Release() { gate_.ReleaseAll(); }
  struct Call {
    int64_t rows, t;
    float max_id;  // largest request id in the pass (queries are filled with their id)
  };
  std::vector<Call> calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  // Waits until `n` passes have begun (true), or `timeout` has passed (false, and the gate is
  // released, so that a failing test leaves no pass held): a held pass has begun once it is
  // recorded, so this is how a test knows the worker is busy.
  bool WaitForCalls(size_t n, std::chrono::milliseconds timeout = 60s) {
    std::unique_lock<std::mutex> lock(mu_);
    if (called_.wait_for(lock, timeout, [&] { return calls_.size() >= n; })) return true;
    lock.unlock();
    Release();
    return false;
  }

 private:
  std::mutex mu_;
  std::condition_variable called_;
  std::vector<Call> calls_;
  testing::PassGate gate_;
};

// Collects results by task id; counts callbacks.
class Results {
 public:
  DoneCallback For(int id) {
    return [this, id](InferenceResult r) {
      std::lock_guard<std::mutex> lock(mu_);
      ++callbacks_[id];
      results_[id] = std::move(r);
      cv_.notify_all();
    };
  }
  bool WaitFor(size_t n, std::chrono::milliseconds timeout = 10s) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return results_.size() >= n; });
  }
  InferenceResult Get(int id) {
    std::lock_guard<std::mutex> lock(mu_);
    return results_.at(id);
  }
  bool Has(int id) {
    std::lock_guard<std::mutex> lock(mu_);
    return results_.count(id) > 0;
  }
  int Callbacks(int id) {
    std::lock_guard<std::mutex> lock(mu_);
    return callbacks_[id];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, InferenceResult> results_;
  std::map<int, int> callbacks_;
};

// A task whose query [rows, t, E] is filled with `id`.
inline InferenceTask Task(int id, int64_t t, int64_t rows = 1) {
  InferenceTask task;
  task.model_name = "fake";
  task.inputs.query = ToHost(at::full({rows, t, kEmbed}, static_cast<float>(id)));
  return task;
}

// Task(id, t) whose first value is NaN: the fake forward fails on it.
inline InferenceTask PoisonedTask(int id, int64_t t) {
  InferenceTask task = Task(id, t);
  at::Tensor query = at::full({1, t, kEmbed}, static_cast<float>(id));
  query[0][0][0] = std::nanf("");
  task.inputs.query = ToHost(query);
  return task;
}

inline BatcherOptions Options(int64_t max_rows, int64_t delay_us, size_t queue = 64) {
  BatcherOptions o;
  o.max_batch_rows = max_rows;
  o.max_batch_tokens = 1 << 20;
  o.max_queue_delay_us = delay_us;
  o.max_queue_size = queue;
  o.instances = 1;  // one worker: the order of passes is deterministic
  return o;
}

inline std::unique_ptr<DynamicBatcher> MakeBatcher(FakeModel& fake, const BatcherOptions& o) {
  const BatchModelInfo info{1, 0, DType::kFloat32};
  return std::make_unique<DynamicBatcher>("fake", info, MakePassRunner(info, fake.Fn()), o);
}

inline void ExpectAnswerFor(Results& results, int id, int64_t t, int64_t rows = 1) {
  const InferenceResult r = results.Get(id);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_TRUE(ToTensor(r.outputs.output).equal(at::full({rows, t, kEmbed}, 2.0f * id)))
      << "task " << id;
}

}  // namespace mha::serve::batcher_testing
