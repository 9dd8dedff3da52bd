// Where a scheduler's answers are delivered (encoded, serialized and sent by the front end's
// callback): inline on the compute thread when the output is small (no extra thread hop on the
// latency), on a completion thread when it is big enough that encoding it and gRPC's Finish
// (milliseconds of copying and socket writes) would hold up the next forward pass.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "server/serving/scheduling/runner.h"

namespace mha::serve {

class CompletionExecutor {
 public:
  // `threads` 0: every completion runs inline. Outputs over `inline_max_bytes` are handed off.
  CompletionExecutor(int threads, int64_t inline_max_bytes);
  ~CompletionExecutor();

  // Calls `done(result)` exactly once: inline, or on a completion thread; never throws.
  void Complete(DoneCallback done, InferenceResult result);
  // Any scheduler's answer (a layer step's too): runs `answer` exactly once, inline when `bytes`
  // (its output's size) is at most inline_max_bytes, else on a completion thread; never throws.
  void Deliver(std::function<void()> answer, int64_t bytes);
  // Runs what is queued, then joins the threads; later completions run inline. Idempotent.
  void Shutdown();

 private:
  void Loop();
  // Runs `answer` here, catching (and logging) what it throws.
  static void RunInline(std::function<void()>& answer);

  const int64_t inline_max_bytes_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool closed_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace mha::serve
