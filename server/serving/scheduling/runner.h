// What a scheduler takes and gives back: a validated request as an InferenceTask, answered once
// with an InferenceResult; and the ModelRunner interface of a scheduler that runs tasks (a kind's:
// the one-layer kind's DynamicBatcher). ServerCore builds the task from a validated request and
// hands it to the version's ServedModel; it never knows what is behind it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "mha/host_io.h"
#include "mha/status.h"
#include "server/serving/caller_thread.h"
#include "server/serving/clock.h"

namespace mha::serve {

// A decoding session's step, opaque here: the kind whose scheduler runs it defines it (the
// one-layer kind: kinds/multihead/session_step.h).
struct SessionStep;

struct InferenceTask {
  std::string model_name;  // for logs
  // Validated once, by ServerCore::Infer; runners and the model trust them. The tensors may borrow
  // the request's bytes: a runner drops the task before it calls `done` (after which the call,
  // and the request with it, may be gone) and never writes to the inputs.
  HostInputs inputs;
  OutputTypes output_types;  // what the answer is written in (the core casts once)
  Clock::time_point deadline = Clock::time_point::max();
  std::function<bool()> is_cancelled;  // empty = never cancelled; must be cheap and thread-safe
  // When ServerCore handed the task over, on its clock (the end of the decode stage); schedulers
  // time the queue on their own clock, from Submit.
  Clock::time_point submitted = Clock::now();
  std::string request_id;
  std::shared_ptr<const SessionStep> step;  // set for a session's step: not a stateless pass
  int64_t layer = 0;                        // a multi-layer model's layer (InferenceRequest::layer)
  CallerThread caller;  // InferenceRequest::caller (stateless forwards; WorkQueue takes it out)
};

struct InferenceResult {
  Status status;
  HostOutputs outputs;     // set when status is OK
  int64_t queue_us = 0;    // enqueue -> compute start (or -> drop)
  int64_t compute_us = 0;  // the pass: merge + Forward + split
  // Parts of compute_us (a merged pass): merging the inputs, splitting the outputs (0 alone).
  int64_t merge_us = 0, split_us = 0;
  Clock::time_point answered_at{};  // when the worker handed the answer over (the completion hop)
  int64_t session_tokens = -1;      // a session step: tokens in the session after it (else -1)
};

using DoneCallback = std::function<void(InferenceResult)>;

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  // Calls `done` exactly once, on some thread: inline on the caller's thread when the task is
  // refused at once (RESOURCE_EXHAUSTED when the queue is full, UNAVAILABLE after Shutdown),
  // otherwise on a worker once the forward pass ran or the task was dropped (DEADLINE_EXCEEDED,
  // CANCELLED). `done` must not block for long and must not throw.
  virtual void Submit(InferenceTask task, DoneCallback done) = 0;

  // Stops accepting, completes every accepted task, joins the workers. Idempotent.
  virtual void Shutdown() = 0;

  // Tasks waiting for a worker right now.
  virtual size_t queue_depth() const = 0;
};

// Answers a task that a runner refuses at once (queue full, shutting down): drops the task first
// (its inputs may borrow the request), then calls `done` with `status`.
inline void Refuse(InferenceTask& task, DoneCallback& done, Status status) {
  task = InferenceTask();
  InferenceResult result;
  result.status = std::move(status);
  done(std::move(result));
}

// The words of a full queue, the same for every scheduler (`items`: what waits).
inline Status QueueFull(size_t waiting, const std::string& model, size_t limit,
                        const char* items = "requests") {
  return ResourceExhausted("queue full: " + std::to_string(waiting) + " " + items +
                           " waiting for model '" + model + "' (--max-queue-size " +
                           std::to_string(limit) +
                           "; the model's config.json max_queue_size overrides it)");
}

}  // namespace mha::serve
