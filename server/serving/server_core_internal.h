// ServerCore's pieces shared by its source files (server_core.cc, server_core_sessions.cc,
// server_core_layers.cc, server_core_analysis.cc).
#pragma once

#include <string>

#include "server/serving/server_core.h"

namespace mha::serve::internal {

struct ResponseDTypes {
  DType output;
  std::optional<ElementType> weights;
};

// The one place mha_requests_total (and mha_request_duration_seconds) counts a request: an
// answered call of `protocol`, from `start` to `end`.
void CountRequest(StatsAggregator* metrics, StatusCode code, Clock::time_point start,
                  Clock::time_point end, Protocol protocol);

// A scheduler's answer: the request's metrics on its handle, then the front end's `done`.
// `count_as`: the protocol to count the outcome under; nullopt = the front end counts it.
// `submitted`: when the scheduler got the task (the end of the decode stage, StageTimes).
void Complete(const ModelHandle& handle, ResponseDTypes dtypes, Clock::time_point start,
              Clock::time_point submitted, std::optional<Protocol> count_as, int64_t rows,
              InferenceResult result, const InferDone& done);

// Answers `request` with `status` before any scheduler saw it: counts the outcome on `metrics`
// (when the core counts it), drops the inputs (they may borrow the wire message), then `done`.
void Refuse(InferenceRequest* request, const InferDone& done, StatsAggregator* metrics,
            Status status, const std::string& model);

// A validated request as its scheduler's task, counted in flight on `handle`, with the callback
// that completes it (Complete, then `done`).
struct Dispatch {
  InferenceTask task;
  DoneCallback finish;
};
Dispatch MakeDispatch(std::shared_ptr<ModelHandle> handle, InferenceRequest* request,
                      InferDone done);

// The one refusal of a call that `handle`'s kind does not offer (a capability its ServedModel
// returns null for): `code` with "<prefix>model 'm' version v (<architecture>) does not offer
// <what>; it offers <the capabilities it has>".
Status NotOffered(StatusCode code, const std::string& prefix, const ModelHandle& handle,
                  const std::string& what);

}  // namespace mha::serve::internal
