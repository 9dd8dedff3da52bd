// The protocol-neutral message of the per-layer step exchange (attention-FFN disaggregation,
// docs/afd.md; mha.v1 LayerSteps): one layer of a multi-layer model for several sessions, run as
// one pass, and its answer. Front ends decode their wire message into a LayerStepRequest and
// encode the LayerStepResponse; ServerCore::StepLayer routes it to the sessions' version, whose
// kind validates it once and queues it (ServedModel::StepLayer).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mha/host_tensor.h"
#include "mha/options.h"
#include "mha/status.h"
#include "server/serving/clock.h"
#include "server/serving/protocol.h"

namespace mha::serve {

struct LayerStepEntry {
  std::string session_id;
  HostTensor hidden;  // [t, E]: may borrow the wire message's bytes
  // The bytes the place its output goes to holds (a shared-memory region the front end writes
  // it into); -1: the output travels in the answer. Checked before the step changes the session.
  int64_t output_capacity = -1;
};

struct LayerStepRequest {
  std::string model, model_version;  // optional: when set, the sessions' must match
  int64_t layer = 0;
  std::vector<LayerStepEntry> entries;  // one per session, all of one model version
  std::optional<DType> output_dtype;    // unset = the model's dtype
  Clock::time_point start = Clock::now();
  Clock::time_point deadline = Clock::time_point::max();
  std::function<bool()> is_cancelled;  // empty = never; cheap and thread-safe
  std::string request_id;
  Protocol protocol = Protocol::kNative;
};

struct LayerStepResponse {
  Status status;
  std::string model, model_version;   // "" when no version was resolved
  std::vector<HostTensor> outputs;    // OK: one [t, E] per entry, in entry order
  std::vector<int64_t> layer_tokens;  // OK: each entry's session's layer length after the step
  int64_t queue_us = 0, compute_us = 0;
  int64_t pass_messages = 0, pass_entries = 0;  // the pass that ran it
};

// Called exactly once per StepLayer, on some thread (inline when refused at once). Must not block
// for long and must not throw.
using LayerStepDone = std::function<void(LayerStepResponse)>;

}  // namespace mha::serve
