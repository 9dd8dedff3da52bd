// ServerCore's pieces shared by its source files (server_core.cc, server_core_sessions.cc).
#pragma once

#include "serving/server_core.h"

namespace mha::serve::internal {

void RecordStats(VersionStats* stats, bool ok, int64_t rows, int64_t queue_us, int64_t compute_us);

struct ResponseDTypes {
  DType output;
  std::optional<at::ScalarType> weights;
};

// A scheduler's answer: the request's metrics on its handle, then the front end's `done`.
// `count_as`: the protocol to count the outcome under; nullopt = the front end counts it.
void Complete(const ModelHandle& handle, ResponseDTypes dtypes, Clock::time_point start,
              std::optional<Protocol> count_as, int64_t rows, InferenceResult result,
              const InferDone& done);

}  // namespace mha::serve::internal
