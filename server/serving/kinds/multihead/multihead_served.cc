#include "server/serving/kinds/multihead/multihead_served.h"

#include <spdlog/spdlog.h>

#include <string>
#include <utility>

#include "mha/text.h"
#include "server/serving/kinds/multihead/dynamic_batcher.h"
#include "server/serving/kinds/multihead/multihead_sessions.h"
#include "server/serving/kinds/multihead/pass_cost.h"
#include "server/serving/kinds/serve_options.h"
#include "server/serving/observability/stats_aggregator.h"
#include "server/serving/repository/model_repository.h"
#include "server/serving/server_core_options.h"

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

class MultiheadServed final : public ServedModel, public SessionSteps, public HeadAnalyzer {
 public:
  MultiheadServed(std::shared_ptr<const MhaModel> model, const ModelEntry& entry,
                  const ServeContext& context)
      : model_(std::move(model)),
        name_(entry.name),
        version_(entry.version),
        info_(entry.info),
        limits_(context.options->limits),
        batcher_options_(SchedulerOf(entry, *context.options)),
        batcher_(DynamicBatcher::ForModel(model_, entry.name, batcher_options_, context.metrics,
                                          limits_.max_work_bytes)),
        sessions_(std::make_unique<MultiheadSessions>(
            SessionOptionsFor(entry, context.options->sessions), limits_, model_,
            SessionLocation{entry.name, entry.version, entry.fingerprint}, context.directory,
            batcher_.get(), context.metrics)) {
    if (context.metrics != nullptr) context.metrics->SetKvBytesPerToken(entry.kv_bytes_per_token);
  }

  // The batcher drains before the sessions end: queued steps still find their store.
  ~MultiheadServed() override { Shutdown(); }
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
    batcher_->Submit(std::move(task), std::move(done));
  }

  Sessions* sessions() override { return sessions_.get(); }
  SessionSteps* session_steps() override { return this; }
  const HeadAnalyzer* head_analysis() const override { return this; }

  Status CheckStep(const InferenceRequest& request) const override {
    return CheckStepRequest(request, name_, version_, limits_);
  }

  void Step(const std::string& session_id, InferenceTask task, DoneCallback done) override {
    sessions_->Step(session_id, std::move(task), std::move(done));
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
  std::unique_ptr<MultiheadSessions> sessions_;
};

}  // namespace

std::unique_ptr<ServedModel> MakeMultiheadServed(std::shared_ptr<const MhaModel> model,
                                                 const ModelEntry& entry,
                                                 const ServeContext& context) {
  return std::make_unique<MultiheadServed>(std::move(model), entry, context);
}

}  // namespace mha::serve
