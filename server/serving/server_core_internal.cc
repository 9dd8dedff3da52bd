// ServerCore's pieces shared by its source files: per-version statistics and the answer path.
#include "server/serving/server_core_internal.h"

#include <chrono>

namespace mha::serve::internal {

namespace {

int64_t NanosBetween(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count();
}

// The computed request's stages but `respond` (timed around the front end's `done`, added after).
StageTimes StagesOf(const InferenceResult& r, Clock::time_point start, Clock::time_point submitted,
                    Clock::time_point completing) {
  StageTimes ns{};
  auto set = [&ns](Stage s, int64_t v) { ns[static_cast<size_t>(s)] = v; };
  set(Stage::kDecode, NanosBetween(start, submitted));
  set(Stage::kQueue, r.queue_us * 1000);
  set(Stage::kMerge, r.merge_us * 1000);
  set(Stage::kForward, (r.compute_us - r.merge_us - r.split_us) * 1000);
  set(Stage::kSplit, r.split_us * 1000);
  if (r.answered_at != Clock::time_point{}) {
    set(Stage::kHandoff, NanosBetween(r.answered_at, completing));
  }
  return ns;
}

}  // namespace

void CountRequest(StatsAggregator* metrics, StatusCode code, Clock::time_point start,
                  Clock::time_point end, Protocol protocol) {
  metrics->RecordRequest(code, MicrosBetween(start, end) * 1e-6, protocol);
}

void Complete(const ModelHandle& handle, ResponseDTypes dtypes, Clock::time_point start,
              Clock::time_point submitted, std::optional<Protocol> count_as, int64_t rows,
              InferenceResult result, const InferDone& done) {
  const Clock::time_point completing = Clock::now();  // one clock read for every duration below
  const double seconds = MicrosBetween(start, completing) * 1e-6;
  StatsAggregator& m = *handle.metrics;
  const bool computed = result.status.ok() || result.compute_us > 0;
  const bool refused = result.status.code() == StatusCode::kResourceExhausted ||
                       result.status.code() == StatusCode::kUnavailable;
  if (!refused || computed) m.RecordQueue(result.queue_us * 1e-6);
  if (computed) m.RecordCompute(result.compute_us * 1e-6);
  m.AddInflight(-1);
  if (count_as) CountRequest(&m, result.status.code(), start, completing, *count_as);
  m.RecordInference(result.status.ok(), rows, result.queue_us, result.compute_us);
  // Counted before the front end answers (what a client then reads includes this request); its
  // respond stage is added once `done` returns.
  if (computed) m.RecordStages(StagesOf(result, start, submitted, completing));
  InferenceResponse response;
  response.status = std::move(result.status);
  response.outputs = std::move(result.outputs);
  response.model = handle.entry->name;
  response.model_version = handle.entry->version;
  response.output_dtype = dtypes.output;
  response.weights_dtype = dtypes.weights;
  response.queue_us = result.queue_us;
  response.compute_us = result.compute_us;
  response.session_tokens = result.session_tokens;
  if (result.session_tokens >= 0) m.RecordStep(seconds);
  done(std::move(response));
  if (computed) m.AddStage(Stage::kRespond, NanosBetween(completing, Clock::now()));
}

void Refuse(InferenceRequest* request, const InferDone& done, StatsAggregator* metrics,
            Status status, const std::string& model) {
  if (request->count_outcome) {
    CountRequest(metrics, status.code(), request->start, Clock::now(), request->protocol);
  }
  request->inputs = HostInputs();
  InferenceResponse response;
  response.status = std::move(status);
  response.model = model;
  done(std::move(response));
}

Dispatch MakeDispatch(std::shared_ptr<ModelHandle> handle, InferenceRequest* request,
                      InferDone done) {
  const int64_t rows = request->inputs.query.defined() ? request->inputs.query.size(0) : 0;
  Dispatch d;
  d.task.model_name = handle->entry->name;
  d.task.inputs = std::move(request->inputs);
  d.task.deadline = request->deadline;
  d.task.is_cancelled = std::move(request->is_cancelled);
  d.task.request_id = request->request_id;
  d.task.layer = request->layer;
  d.task.caller = request->caller;
  const ResponseDTypes dtypes{request->output_dtype.value_or(handle->entry->info.options.dtype),
                              d.task.inputs.weights_dtype};
  d.task.output_types = OutputTypes{ToElementType(dtypes.output), dtypes.weights};
  d.task.output_types.output_place = d.task.inputs.output_place;  // CUDA shared memory
  d.task.output_types.attn_weights_place = d.task.inputs.attn_weights_place;
  const Clock::time_point start = request->start;
  const std::optional<Protocol> count_as =
      request->count_outcome ? std::optional<Protocol>(request->protocol) : std::nullopt;
  handle->metrics->AddInflight(1);
  const Clock::time_point submitted = d.task.submitted;
  d.finish = [handle = std::move(handle), dtypes, start, submitted, count_as, rows,
              done = std::move(done)](InferenceResult result) {
    Complete(*handle, dtypes, start, submitted, count_as, rows, std::move(result), done);
  };
  return d;
}

Status NotOffered(StatusCode code, const std::string& prefix, const ModelHandle& handle,
                  const std::string& what) {
  ServedModel& served = *handle.served;
  std::string offers = "stateless forwards";
  if (served.sessions() != nullptr) offers += ", decoding sessions";
  if (served.session_steps() != nullptr) offers += ", session steps in Forward calls";
  if (served.layer_steps() != nullptr) offers += ", layer steps (LayerSteps)";
  if (served.head_analysis() != nullptr) offers += ", head analysis (AnalyzeModel)";
  const ModelEntry& e = *handle.entry;
  return Status(code, prefix + "model '" + e.name + "' version " + e.version + " (" +
                          ArchitectureOf(e) + ") does not offer " + what + "; it offers " + offers);
}

}  // namespace mha::serve::internal
