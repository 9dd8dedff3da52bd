#include "server/serving/kinds/llama/llama_served.h"

#include <spdlog/spdlog.h>

#include <string>
#include <utility>
#include <vector>

#include "mha/text.h"
#include "server/serving/kinds/llama/layer_step_scheduler.h"
#include "server/serving/kinds/llama/llama_requests.h"
#include "server/serving/kinds/llama/llama_session_store.h"
#include "server/serving/kinds/serve_options.h"
#include "server/serving/repository/model_repository.h"
#include "server/serving/scheduling/dynamic_batcher.h"
#include "server/serving/server_core_options.h"

namespace mha::serve {
namespace {

// Stateless forwards of a stack: RunOne runs InferenceTask::layer over its query (LlamaForward);
// merged passes and session steps are INTERNAL (its scheduler runs one request per pass).
class LlamaPassRunner final : public PassRunner {
 public:
  explicit LlamaPassRunner(std::shared_ptr<const LlamaAttentionStack> stack)
      : stack_(std::move(stack)) {}

  Status RunOne(const InferenceTask& task, HostOutputs* out) const override {
    if (task.step) return Internal("a Llama model's session steps go through LayerSteps");
    auto output = LlamaForward(*stack_, task.layer, task.inputs.query, task.output_types.output);
    if (!output.ok()) return output.status();
    *out = HostOutputs();
    out->output = std::move(output.value());
    return Status::Ok();
  }
  Status RunMerged(const std::vector<const InferenceTask*>&, std::vector<HostOutputs>*,
                   const ClockSource&, PassTimes*) const override {
    return Internal("a Llama model's stateless passes are not merged");
  }
  Status RunSteps(const std::vector<const InferenceTask*>&,
                  std::vector<HostOutputs>*) const override {
    return Internal("a Llama model's session steps go through LayerSteps");
  }

 private:
  const std::shared_ptr<const LlamaAttentionStack> stack_;
};

class LlamaServed final : public ServedModel {
 public:
  LlamaServed(std::shared_ptr<const LlamaAttentionStack> stack, const LlamaModelInfo& info,
              const ModelEntry& entry, const ServeContext& context)
      : version_{entry.name, entry.version, info}, limits_(context.options->limits) {
    const ServerCoreOptions& options = *context.options;
    forwards_options_ = SchedulerOptionsFor(entry.config, /*batching=*/false, options.batcher);
    forwards_options_.max_batch_work_bytes = limits_.max_work_bytes;
    forwards_ = std::make_unique<DynamicBatcher>(entry.name, MakeBatchModelInfo(entry.info),
                                                 std::make_unique<LlamaPassRunner>(stack),
                                                 forwards_options_, context.metrics);
    SessionOptions sessions = options.sessions;
    sessions.max_work_bytes = limits_.max_work_bytes;
    sessions.max_response_bytes = limits_.max_response_bytes;
    sessions_ = std::make_unique<LlamaSessionStore>(sessions, stack, info,
                                                    SessionLocation{entry.name, entry.version},
                                                    context.directory, context.metrics);
    const BatcherOptions steps = BatcherOptionsFor(entry.config, options.batcher);
    steps_ = LayerStepScheduler::Create(steps, stack, sessions_.get(), entry.name, context.metrics);
    spdlog::info(
        "model {} (llama, {} layers) scheduler: stateless forwards one per pass, queue={} "
        "instances={}; layer steps merged up to {} tokens, delay_us={} queue={} instances={}",
        entry.name, info.num_layers, forwards_options_.max_queue_size, forwards_options_.instances,
        steps.max_batch_tokens, steps.max_queue_delay_us, steps.max_queue_size, steps.instances);
  }

  ~LlamaServed() override { Shutdown(); }
  void Shutdown() override {
    forwards_->Shutdown();
    steps_->Shutdown();
  }

  SchedulerView scheduling() const override { return ViewOf(forwards_options_); }

  Status ValidateForward(const InferenceRequest& request) const override {
    return ValidateLlamaForward(version_, request, limits_);
  }

  void Submit(InferenceTask task, DoneCallback done) override {
    forwards_->Submit(std::move(task), std::move(done));
  }

  StatusOr<OpenSessionResponse> OpenSession(const OpenSessionRequest& request) override {
    auto max_tokens = LlamaSessionMaxTokens(version_, request, limits_);
    if (!max_tokens.ok()) return max_tokens.status();
    auto info = sessions_->Open(*max_tokens, request.session_id);
    if (!info.ok()) return info.status();
    SessionInfo opened = info.value();
    opened.batch_size = 1;  // one sequence
    return OpenedSession(opened, version_.name, version_.version);
  }

  StatusOr<CloseSessionResponse> CloseSession(const std::string& session_id) override {
    return ClosedSession(sessions_->Close(session_id));
  }

  Status CheckStep(const InferenceRequest& request) const override {
    return InvalidArgument("session_id: session '" + Abbreviate(request.session_id) +
                           "' is on the Llama model '" + version_.name +
                           "': its steps are LayerSteps messages, one layer at a time");
  }
  // CheckStep refuses every step first; a caller that skipped it gets the same refusal.
  void Step(const std::string& session_id, InferenceTask task, DoneCallback done) override {
    InferenceRequest request;
    request.session_id = session_id;
    Refuse(task, done, CheckStep(request));
  }

  Status StepLayer(LayerStepRequest& request, LayerStepDone done) override {
    MHA_RETURN_IF_ERROR(CheckLayerStep(version_, request, limits_));
    std::vector<std::string> ids;
    for (const LayerStepEntry& entry : request.entries) ids.push_back(entry.session_id);
    auto held = sessions_->Acquire(ids);
    if (!held.ok()) return held.status();
    LayerStepTask task;
    task.layer = request.layer;
    task.sessions = std::move(held.value());
    for (LayerStepEntry& entry : request.entries) task.hidden.push_back(std::move(entry.hidden));
    task.output = ToElementType(request.output_dtype.value_or(version_.info.dtype));
    task.deadline = request.deadline;
    task.is_cancelled = std::move(request.is_cancelled);
    task.request_id = request.request_id;
    task.done = std::move(done);
    steps_->Submit(std::move(task));
    return Status::Ok();
  }

  StatusOr<HeadAnalysis> AnalyzeHeads() const override {
    return FailedPrecondition("model '" + version_.name +
                              "' is a Llama stack: AnalyzeModel analyses one attention layer's "
                              "heads (nn.MultiheadAttention models)");
  }

 private:
  const LlamaVersion version_;
  const RequestLimits limits_;
  BatcherOptions forwards_options_;
  std::unique_ptr<DynamicBatcher> forwards_;
  std::unique_ptr<LlamaSessionStore> sessions_;
  // After `sessions_`: destroyed first, it runs what is queued and releases its sessions.
  std::unique_ptr<LayerStepScheduler> steps_;
};

}  // namespace

std::unique_ptr<ServedModel> MakeLlamaServed(std::shared_ptr<const LlamaAttentionStack> stack,
                                             const LlamaModelInfo& info, const ModelEntry& entry,
                                             const ServeContext& context) {
  return std::make_unique<LlamaServed>(std::move(stack), info, entry, context);
}

}  // namespace mha::serve
