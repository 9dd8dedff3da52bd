// A fake serving core for the front-end tests (tests/unit/frontends/*_frontend_test.cc): the
// handlers and stream reactors only translate, so a core that answers output = 2 * query (or an
// error for a negative first element), or holds the calls until the test answers them, is enough.
// No model, no CPU-speed dependence.
//
//   std::future<Status> stream;               // what waits on held calls, declared first
//   const auto hold = core.Hold();            // calls from now on wait until answered
//   stream = std::async(...);
//   ASSERT_TRUE(core.AnswerHeldInReverse(4));
//
// A failing test never hangs on it: the Holding that Hold() returns answers every call still held
// (and holds none after it) when it goes out of scope, also when an assertion ends the test early;
// declared after the futures and streams that wait on held calls, it runs before they wait. The
// FakeCore's own destructor does the same.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "mha/tensor_adapter.h"
#include "server/serving/inference_server.h"

namespace mha::serve {

class FakeCore final : public InferenceServer {
 public:
  struct Call {
    InferenceRequest request;
    InferDone done;
  };
  // Hold()'s scope: its destructor is ReleaseAll().
  class [[nodiscard]] Holding {
   public:
    explicit Holding(FakeCore* core) : core_(core) {}
    ~Holding() {
      if (core_ != nullptr) core_->ReleaseAll();
    }
    Holding(Holding&& other) noexcept : core_(std::exchange(other.core_, nullptr)) {}
    Holding(const Holding&) = delete;
    Holding& operator=(const Holding&) = delete;
    Holding& operator=(Holding&&) = delete;

   private:
    FakeCore* core_;
  };

  FakeCore() = default;
  ~FakeCore() override { ReleaseAll(); }
  FakeCore(const FakeCore&) = delete;
  FakeCore& operator=(const FakeCore&) = delete;

  // hold = false: answers at once (output = 2 * query, or `error` when set).
  void Infer(InferenceRequest request, InferDone done) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++infer_calls_;
    if (hold_) {
      held_.push_back({std::move(request), std::move(done)});
      cv_.notify_all();
      return;
    }
    lock.unlock();
    Answer({std::move(request), std::move(done)});
  }
  void CountRequest(const std::optional<std::string>&, const Status& status, Clock::time_point,
                    Protocol) override {
    std::lock_guard<std::mutex> lock(mu_);
    refused_.push_back(status);
  }
  std::shared_ptr<const ModelRepository> repository() const override { return repository_; }

  void Answer(Call call) {
    InferenceResponse r;
    r.model = "m";
    r.model_version = "7";
    r.queue_us = 11;
    r.compute_us = 22;
    r.output_dtype = call.request.output_dtype.value_or(DType::kFloat32);
    r.weights_dtype = call.request.inputs.weights_dtype;
    const at::Tensor query = ToTensor(call.request.inputs.query);
    const float marker = query.flatten()[0].item<float>();
    if (marker < 0) {
      r.status = OutOfRange("marker " + std::to_string(marker) + " is negative");
    } else {  // in the types asked for, as the core answers
      const ElementType output = ToElementType(r.output_dtype);
      r.outputs.output = ToHost(query * 2, output);
      if (call.request.inputs.need_weights) {
        r.outputs.attn_weights = ToHost(at::ones({1, 2, 3}), r.weights_dtype.value_or(output));
      }
    }
    {
      // Under mu_: Answer runs on gRPC's threads (and the test's, for held calls), and the test
      // reads what was seen on its own thread (Last()); gRPC's synchronisation between the two
      // is invisible to ThreadSanitizer, a lock is not. Tensors may borrow the call's message,
      // valid only until `done`: keep copies.
      std::lock_guard<std::mutex> lock(mu_);
      seen_.push_back(call.request.model);
      last_ = std::move(call.request);
      last_.inputs.query = ToHost(query.clone());
    }
    call.done(std::move(r));
  }
  // What the test reads and sets, under mu_ (see Answer).
  InferenceRequest Last() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_;
  }
  std::vector<Status> Refused() {
    std::lock_guard<std::mutex> lock(mu_);
    return refused_;
  }
  int InferCalls() {
    std::lock_guard<std::mutex> lock(mu_);
    return infer_calls_;
  }
  // Calls from now on are held (not answered) until the test answers them, or until the
  // returned Holding (or the FakeCore) goes out of scope.
  Holding Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = true;
    return Holding(this);
  }
  // Stops holding and answers every call still held, in the order they came.
  void ReleaseAll() {
    std::deque<Call> calls;
    {
      std::lock_guard<std::mutex> lock(mu_);
      hold_ = false;
      calls.swap(held_);
    }
    for (Call& call : calls) Answer(std::move(call));
  }
  size_t HeldCalls() {
    std::lock_guard<std::mutex> lock(mu_);
    return held_.size();
  }
  // Waits until `n` calls are held, then answers them in reverse order.
  bool AnswerHeldInReverse(size_t n) {
    std::vector<Call> calls;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, std::chrono::seconds(30), [&] { return held_.size() >= n; }))
        return false;
      for (size_t i = 0; i < n; ++i) {
        calls.push_back(std::move(held_.front()));
        held_.pop_front();
      }
    }
    for (auto it = calls.rbegin(); it != calls.rend(); ++it) Answer(std::move(*it));
    return true;
  }

  std::mutex mu_;  // guards everything below but repository_
  std::condition_variable cv_;
  bool hold_ = false;
  int infer_calls_ = 0;
  std::deque<Call> held_;
  std::vector<Status> refused_;
  std::vector<std::string> seen_;
  InferenceRequest last_;
  std::shared_ptr<const ModelRepository> repository_ =
      std::make_shared<const ModelRepository>(std::vector<ModelEntry>(), "");
};

}  // namespace mha::serve
