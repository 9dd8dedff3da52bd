// Shared by the Llama serving suites (llama_session_store_test.cc, layer_step_scheduler_test.cc,
// server_core_llama_test.cc): the fixture stacks through the core's torch-free API, the fixture
// sessions' rows as host tensors, and an in-process hold gate for the schedulers' pass hook.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>

#include "llama_test_util.h"
#include "mha/llama_engine.h"
#include "mha/tensor_adapter.h"
#include "server/serving/sessions/session_store.h"
#include "test_util.h"

namespace mha::testing {

inline LoadedLlamaModel LoadFixtureModel(const std::string& name) {
  LlamaLoadOptions options;
  options.path = FixturePath("llama/" + name);
  options.device = "cpu";
  auto loaded = LoadLlamaModel(options);
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  return loaded.ok() ? loaded.value() : LoadedLlamaModel();
}

// Rows [begin, begin + n) of a [T, E] tensor as a host tensor.
inline HostTensor Rows(const at::Tensor& t, int64_t begin, int64_t n) {
  return ToHost(t.narrow(0, begin, n).contiguous());
}

inline serve::SessionOptions SmallPool(int64_t bytes, int64_t block_tokens) {
  serve::SessionOptions o;
  o.pool.capacity_bytes = bytes;
  o.pool.block_tokens = block_tokens;
  return o;
}

// Holds the passes of a scheduler (its pass_hook) until released; counts those entered.
class PassGate {
 public:
  std::function<Status(const std::function<Status()>&)> Hook() {
    return [this](const std::function<Status()>& pass) {
      std::unique_lock<std::mutex> lock(mu_);
      const int64_t k = ++entered_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return !holding_ || released_ >= k; });
      lock.unlock();
      return pass();
    };
  }
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    holding_ = true;
  }
  void Release(int64_t k) {  // lets passes 1 .. k through
    std::lock_guard<std::mutex> lock(mu_);
    released_ = k;
    cv_.notify_all();
  }
  void ReleaseAll() {
    std::lock_guard<std::mutex> lock(mu_);
    holding_ = false;
    cv_.notify_all();
  }
  ::testing::AssertionResult WaitEntered(int64_t k) {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, std::chrono::seconds(60), [&] { return entered_ >= k; })) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "pass " << k << " never reached the gate";
  }
  int64_t entered() {
    std::lock_guard<std::mutex> lock(mu_);
    return entered_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool holding_ = false;
  int64_t entered_ = 0, released_ = 0;
};

}  // namespace mha::testing
