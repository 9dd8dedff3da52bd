// ForwardRequest -> validated mha::ForwardInputs (and back to a ForwardResponse). Shared by the
// unary and the streaming handler. Order of checks: message size, model, tensor headers (pure
// byte/shape arithmetic), limits, ranks, then decode and the model's own ValidateInputs -- all
// before any forward pass.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mha/model.h"
#include "mha/status.h"
#include "mha/v1/attention.pb.h"
#include "model_repository.h"
#include "runner.h"

namespace mha::serve {

struct RequestLimits {
  int64_t max_batch_size = 64;
  int64_t max_sequence_length = 4096;
  int64_t max_message_bytes = 64 << 20;
};

struct PreparedForward {
  std::shared_ptr<const ModelEntry> entry;  // keeps the model alive
  ForwardInputs inputs;
  v1::DataType output_dtype = v1::DATA_TYPE_UNSPECIFIED;  // resolved (never UNSPECIFIED)
};

// borrow: the input tensors point into `request`'s bytes (no copy) where alignment allows; the
// request must then outlive the task (true for unary calls, not for a stream's reused buffer).
StatusOr<PreparedForward> PrepareForward(const v1::ForwardRequest& request,
                                         const ModelRepository* repository,
                                         const RequestLimits& limits, bool borrow = false);

// What the response needs besides the result (copied out of the request before it runs).
struct ResponseSpec {
  std::string model;
  std::string version;
  v1::DataType output_dtype = v1::FLOAT32;
  bool need_weights = false;
};
ResponseSpec MakeResponseSpec(const PreparedForward& prepared);

// Encodes the result (status must be OK) into `response`.
Status BuildResponse(const InferenceResult& result, const ResponseSpec& spec,
                     v1::ForwardResponse* response);

// Metadata of one model for ListModels/GetModel.
void FillModelInfo(const ModelEntry& entry, bool is_default, v1::ModelInfo* info);

}  // namespace mha::serve
