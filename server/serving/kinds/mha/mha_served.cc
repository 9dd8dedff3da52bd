#include "server/serving/kinds/mha/mha_served.h"

#include <spdlog/spdlog.h>

#include <string>
#include <utility>

#include "mha/text.h"
#include "server/serving/budget.h"
#include "server/serving/kinds/serve_options.h"
#include "server/serving/repository/model_repository.h"
#include "server/serving/scheduling/dynamic_batcher.h"
#include "server/serving/server_core_options.h"
#include "server/serving/sessions/session_store.h"

namespace mha::serve {
namespace {

Status CheckLimits(const HostInputs& in, const RequestLimits& limits) {
  const int64_t b = in.query.size(0);
  if (b > limits.max_batch_size) {
    return ResourceExhausted("query: batch size " + std::to_string(b) +
                             " exceeds --max-batch-size " + std::to_string(limits.max_batch_size));
  }
  auto check_length = [&](const char* field, int64_t length) {
    if (length <= limits.max_sequence_length) return Status::Ok();
    return ResourceExhausted(std::string(field) + ": sequence length " + std::to_string(length) +
                             " exceeds --max-sequence-length " +
                             std::to_string(limits.max_sequence_length));
  };
  MHA_RETURN_IF_ERROR(check_length("query", in.query.size(1)));
  if (in.key.defined()) {
    MHA_RETURN_IF_ERROR(check_length("key", in.key.size(1)));
    MHA_RETURN_IF_ERROR(check_length("value", in.value.size(1)));
  }
  return Status::Ok();
}

Status CheckOpenLimits(const OpenSessionRequest& r, const MhaOptions& o,
                       const RequestLimits& limits) {
  if (r.batch_size < 0) {
    return InvalidArgument("batch_size: must be >= 1 (0 = 1), got " + std::to_string(r.batch_size));
  }
  if (r.batch_size > limits.max_batch_size) {
    return ResourceExhausted("batch_size: " + std::to_string(r.batch_size) +
                             " exceeds --max-batch-size " + std::to_string(limits.max_batch_size));
  }
  if (r.max_tokens < 0) {
    return InvalidArgument("max_tokens: must be >= 1 (0 = --max-sequence-length), got " +
                           std::to_string(r.max_tokens));
  }
  if (r.max_tokens > limits.max_sequence_length) {
    return ResourceExhausted("max_tokens: " + std::to_string(r.max_tokens) +
                             " exceeds --max-sequence-length " +
                             std::to_string(limits.max_sequence_length));
  }
  const bool cross = r.key.defined() || r.value.defined();
  if (!cross && !o.same_embed_dim()) {
    return InvalidArgument("key/value: the model has kdim=" + std::to_string(o.key_dim()) +
                           " vdim=" + std::to_string(o.value_dim()) +
                           " != embed_dim=" + std::to_string(o.embed_dim) +
                           ": only cross-attention sessions (OpenSession with key and value)");
  }
  if (cross && r.key.defined() && r.key.dim() == 3 && r.key.size(1) > limits.max_sequence_length) {
    return ResourceExhausted("key: sequence length " + std::to_string(r.key.size(1)) +
                             " exceeds --max-sequence-length " +
                             std::to_string(limits.max_sequence_length));
  }
  return Status::Ok();
}

// A step's own checks: the session's model, no key/value or head options, the length limit.
// Shapes against the cache are the store's to check when the step's turn comes.
Status CheckStepRequest(const InferenceRequest& r, const std::string& name,
                        const std::string& version, const RequestLimits& limits) {
  if ((!r.model.empty() && r.model != name) ||
      (!r.model_version.empty() && r.model_version != version)) {
    return InvalidArgument("model: session '" + Abbreviate(r.session_id) + "' is on model '" +
                           name + "' version " + version + ", the request names '" +
                           Abbreviate(r.model) + "' version '" + Abbreviate(r.model_version) +
                           "' (leave model and model_version empty in a step)");
  }
  if (r.inputs.key.defined() || r.inputs.value.defined()) {
    return InvalidArgument(
        "key/value: a session step carries only its new tokens (query); a cross-attention "
        "session's key/value are given once, to OpenSession");
  }
  if (r.inputs.wants_head_options()) {
    return InvalidArgument(
        "weights_heads/weights_query_*/weights_top_k/weights_dtype/head_stats/head_mask: head "
        "options are not available on a session step (need_weights and average_attn_weights "
        "are); send them in a stateless Forward");
  }
  const HostTensor& q = r.inputs.query;
  if (q.defined() && q.dim() == 3 && q.size(1) > limits.max_sequence_length) {
    return ResourceExhausted("query: sequence length " + std::to_string(q.size(1)) +
                             " exceeds --max-sequence-length " +
                             std::to_string(limits.max_sequence_length));
  }
  return Status::Ok();
}

BatcherOptions SchedulerOf(const ModelEntry& entry, const ServerCoreOptions& options) {
  BatcherOptions o = SchedulerOptionsFor(entry.config, options.batching, options.batcher);
  o.max_batch_work_bytes = options.limits.max_work_bytes;
  if (o.batching) {
    spdlog::info("model {} scheduler: batching rows={} tokens={} delay_us={} queue={} instances={}",
                 entry.name, o.max_batch_rows, o.max_batch_tokens, o.max_queue_delay_us,
                 o.max_queue_size, o.instances);
  } else {
    spdlog::info("model {} scheduler: one request per pass, queue={} instances={}", entry.name,
                 o.max_queue_size, o.instances);
  }
  return o;
}

class MhaServed final : public ServedModel {
 public:
  MhaServed(std::shared_ptr<const MhaModel> model, const ModelEntry& entry,
            const ServeContext& context)
      : model_(std::move(model)),
        name_(entry.name),
        version_(entry.version),
        info_(entry.info),
        limits_(context.options->limits),
        batcher_options_(SchedulerOf(entry, *context.options)),
        batcher_(DynamicBatcher::ForModel(model_, entry.name, batcher_options_, context.metrics)) {
    SessionOptions sessions = context.options->sessions;
    sessions.max_work_bytes = limits_.max_work_bytes;
    sessions.max_response_bytes = limits_.max_response_bytes;
    sessions_ =
        std::make_unique<SessionStore>(sessions, model_, SessionLocation{entry.name, entry.version},
                                       context.directory, batcher_.get(), context.metrics);
  }

  // The batcher drains before the sessions end: queued steps still find their store.
  ~MhaServed() override { Shutdown(); }
  void Shutdown() override { batcher_->Shutdown(); }

  SchedulerView scheduling() const override { return ViewOf(batcher_options_); }

  Status ValidateForward(const InferenceRequest& request) const override {
    if (request.layer != 0) {
      return InvalidArgument("layer: " + std::to_string(request.layer) + " but model '" + name_ +
                             "' is one attention layer (only layer 0)");
    }
    MHA_RETURN_IF_ERROR(ValidateInputs(*model_, request.inputs));
    MHA_RETURN_IF_ERROR(CheckLimits(request.inputs, limits_));
    const PassCost cost =
        EstimatePassCost(info_, request.output_dtype.value_or(info_.options.dtype), request.inputs);
    return CheckPassCost(cost, request.inputs, limits_.max_response_bytes, limits_.max_work_bytes);
  }

  void Submit(InferenceTask task, DoneCallback done) override {
    task.model = model_;
    batcher_->Submit(std::move(task), std::move(done));
  }

  StatusOr<OpenSessionResponse> OpenSession(const OpenSessionRequest& r) override {
    MHA_RETURN_IF_ERROR(CheckOpenLimits(r, info_.options, limits_));
    OpenSessionParams params;
    params.batch_size = r.batch_size == 0 ? 1 : r.batch_size;
    params.max_tokens = r.max_tokens == 0 ? limits_.max_sequence_length : r.max_tokens;
    params.key = r.key;
    params.value = r.value;
    params.id = r.session_id;
    auto info = sessions_->Open(params);
    if (!info.ok()) return info.status();
    return OpenedSession(info.value(), name_, version_);
  }

  StatusOr<CloseSessionResponse> CloseSession(const std::string& session_id) override {
    return ClosedSession(sessions_->Close(session_id));
  }

  StatusOr<ForkSessionResponse> ForkSession(const ForkSessionRequest& r) override {
    return ForkedSession(sessions_->Fork(r.session_id, r.tokens, r.new_session_id), name_,
                         version_);
  }

  StatusOr<TruncateSessionResponse> TruncateSession(const std::string& session_id,
                                                    int64_t tokens) override {
    return TruncatedSession(sessions_->Truncate(session_id, tokens));
  }

  Status CheckStep(const InferenceRequest& request) const override {
    return CheckStepRequest(request, name_, version_, limits_);
  }

  void Step(const std::string& session_id, InferenceTask task, DoneCallback done) override {
    task.model = model_;
    sessions_->Step(session_id, std::move(task), std::move(done));
  }

  Status StepLayer(LayerStepRequest& request, LayerStepDone) override {
    return InvalidArgument("entries[0]: session '" + Abbreviate(request.entries[0].session_id) +
                           "' is on model '" + name_ +
                           "', one attention layer: its steps are Forward calls with session_id "
                           "(LayerSteps steps the sessions of multi-layer stacks)");
  }

  StatusOr<HeadAnalysis> AnalyzeHeads() const override { return AnalyzeModelHeads(*model_); }

 private:
  const std::shared_ptr<const MhaModel> model_;
  const std::string name_, version_;
  const ModelInfo info_;
  const RequestLimits limits_;
  const BatcherOptions batcher_options_;
  std::unique_ptr<DynamicBatcher> batcher_;
  // After the batcher: destroyed first, it ends its sessions before the batcher drains.
  std::unique_ptr<SessionStore> sessions_;
};

}  // namespace

std::unique_ptr<ServedModel> MakeMhaServed(std::shared_ptr<const MhaModel> model,
                                           const ModelEntry& entry, const ServeContext& context) {
  return std::make_unique<MhaServed>(std::move(model), entry, context);
}

}  // namespace mha::serve
