// The protocol-neutral request and response of ServerCore::Infer. Front ends (gRPC mha.v1, the
// Open Inference Protocol) decode their wire message into an InferenceRequest and encode the
// InferenceResponse; nothing here knows a wire format.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "mha/host_io.h"
#include "mha/options.h"
#include "mha/status.h"
#include "server/serving/caller_thread.h"
#include "server/serving/clock.h"
#include "server/serving/protocol.h"

namespace mha::serve {

struct InferenceRequest {
  std::string model;          // "" = the default model
  std::string model_version;  // "" = the model's newest READY version
  // Decoded but not yet validated: ServerCore::Infer validates once (shapes against the model,
  // limits). The tensors may borrow the wire message's bytes; the front end keeps the message
  // alive until `done` has run.
  HostInputs inputs;
  std::optional<DType> output_dtype;       // unset = the model's dtype (the core casts once)
  Clock::time_point start = Clock::now();  // when the front end received it
  Clock::time_point deadline = Clock::time_point::max();
  std::function<bool()> is_cancelled;  // empty = never; must be cheap and thread-safe
  std::string request_id;
  // false: ServerCore does not count this request's outcome in mha_requests_total; the front end
  // does (InferenceServer::CountRequest), e.g. only once the answer has been written.
  bool count_outcome = true;
  Protocol protocol = Protocol::kNative;  // the front end's: mha_protocol_requests_total
  // A decoding session's step (docs/sessions.md): `inputs.query` holds only the new tokens and
  // the session's model version answers; model / model_version may be left empty.
  std::string session_id;
  // A multi-layer model's layer (ForwardRequest.layer, docs/afd.md); other models only have 0.
  int64_t layer = 0;
  // The front end's thread (caller_thread.h): whether it may run the pass itself when nothing
  // waits for the model and one of its instances is idle (WorkQueue's inline pass: no hand-off to
  // a worker and back), and what it does before it blocks.
  CallerThread caller;
};

// OpenSession: a decoding session on one model version (docs/sessions.md).
struct OpenSessionRequest {
  std::string model;          // "" = the default model
  std::string model_version;  // "" = the newest READY version; the session stays on it
  int64_t batch_size = 1;     // 0 = 1
  int64_t max_tokens = 0;     // tokens per row; 0 = --max-sequence-length
  HostTensor key, value;      // both: cross-attention over these [B, S, kdim] / [B, S, vdim]
  std::string session_id;     // client-chosen (CheckSessionId); "" = the server makes one
  CallerThread caller;        // a projection or a spill blocks it (caller_thread.h)
};

struct OpenSessionResponse {
  std::string session_id;
  std::string model, model_version;
  int64_t batch_size = 0, max_tokens = 0;
  bool cross_attention = false;
  int64_t kv_block_tokens = 0;
  int64_t kv_blocks = 0;  // held after opening (a cross-attention session's encoder keys)
};

struct CloseSessionResponse {
  int64_t tokens = 0;     // tokens decoded per row
  int64_t kv_blocks = 0;  // blocks given back
};

// ForkSession: a new session holding the first `tokens` tokens of `session_id` (docs/sessions.md).
struct ForkSessionRequest {
  std::string session_id;      // the source
  int64_t tokens = 0;          // tokens per row kept; 0 = all
  std::string new_session_id;  // client-chosen (CheckSessionId); "" = the server makes one
  CallerThread caller;         // a restore or a spill blocks it (caller_thread.h)
};

// The fork: OpenSession's answer plus what it holds.
struct ForkSessionResponse {
  OpenSessionResponse session;
  int64_t tokens = 0;            // tokens per row
  int64_t kv_shared_blocks = 0;  // of session.kv_blocks, those another session holds too
};

// TruncateSession's answer: what the session holds now.
struct TruncateSessionResponse {
  int64_t tokens = 0;
  int64_t kv_blocks = 0;
  int64_t kv_shared_blocks = 0;
};

struct InferenceResponse {
  Status status;
  HostOutputs outputs;  // set when status is OK: in output_dtype / weights_dtype already
  std::string model;    // the model that answered ("" when none was resolved)
  std::string model_version;
  DType output_dtype = DType::kFloat32;  // the request's, else the model's
  // The request's weights_dtype (the weights tensors already have it); unset = output_dtype.
  std::optional<ElementType> weights_dtype;
  int64_t queue_us = 0;
  int64_t compute_us = 0;
  int64_t session_tokens = -1;  // a session step: tokens in the session after it (else -1)
};

// Called exactly once per Infer, on some thread (inline when refused at once). Must not block for
// long and must not throw.
using InferDone = std::function<void(InferenceResponse)>;

}  // namespace mha::serve
