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
#include "server/serving/server_core_options.h"

namespace mha::serve {
namespace {

class LlamaServed final : public ServedModel {
 public:
  LlamaServed(std::shared_ptr<const LlamaAttentionStack> stack, const LlamaModelInfo& info,
              const ModelEntry& entry, const ServeContext& context)
      : version_{entry.name, entry.version, info}, limits_(context.options->limits) {
    const ServerCoreOptions& options = *context.options;
    SessionOptions sessions = options.sessions;
    sessions.max_work_bytes = limits_.max_work_bytes;
    sessions.max_response_bytes = limits_.max_response_bytes;
    sessions_ = std::make_unique<LlamaSessionStore>(sessions, stack, info,
                                                    SessionLocation{entry.name, entry.version},
                                                    context.directory, context.metrics);
    // One queue for the version: layer steps merge (same layer, up to max_batch_tokens);
    // stateless forwards run one per pass.
    steps_options_ = SchedulerOptionsFor(entry.config, /*batching=*/true, options.batcher);
    steps_ = LayerStepScheduler::Create(steps_options_, stack, sessions_.get(), entry.name,
                                        context.metrics);
    spdlog::info(
        "model {} (llama, {} layers) scheduler: one queue={} instances={}; layer steps merged up "
        "to {} tokens, delay_us={}; stateless forwards one per pass",
        entry.name, info.num_layers, steps_options_.max_queue_size, steps_options_.instances,
        steps_options_.max_batch_tokens, steps_options_.max_queue_delay_us);
  }

  ~LlamaServed() override { Shutdown(); }
  void Shutdown() override { steps_->Shutdown(); }

  SchedulerView scheduling() const override { return ViewOf(steps_options_); }

  Status ValidateForward(const InferenceRequest& request) const override {
    return ValidateLlamaForward(version_, request, limits_);
  }

  void Submit(InferenceTask task, DoneCallback done) override {
    steps_->SubmitForward(std::move(task), std::move(done));
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

  StatusOr<ForkSessionResponse> ForkSession(const ForkSessionRequest& r) override {
    return ForkedSession(sessions_->Fork(r.session_id, r.tokens, r.new_session_id), version_.name,
                         version_.version);
  }

  StatusOr<TruncateSessionResponse> TruncateSession(const std::string& session_id,
                                                    int64_t tokens) override {
    return TruncatedSession(sessions_->Truncate(session_id, tokens));
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
    auto task = std::make_shared<LayerStepTask>();
    task->layer = request.layer;
    for (LayerStepEntry& entry : request.entries) task->hidden.push_back(std::move(entry.hidden));
    task->output = ToElementType(request.output_dtype.value_or(version_.info.dtype));
    task->deadline = request.deadline;
    task->is_cancelled = std::move(request.is_cancelled);
    task->request_id = request.request_id;
    task->done = std::move(done);
    // Its turn at the session gate sends it to the scheduler; a session closed before that
    // refuses it.
    return sessions_->Acquire(
        ids,
        [this, task](LlamaStepHold hold) {
          task->hold = std::move(hold);
          steps_->Submit(std::move(*task));
        },
        [task](Status why) {
          LayerStepDone answer = std::move(task->done);
          *task = LayerStepTask();  // drop the inputs (they may borrow the message) first
          LayerStepResponse response;
          response.status = std::move(why);
          answer(std::move(response));
        });
  }

  StatusOr<HeadAnalysis> AnalyzeHeads() const override {
    return FailedPrecondition("model '" + version_.name +
                              "' is a Llama stack: AnalyzeModel analyses one attention layer's "
                              "heads (nn.MultiheadAttention models)");
  }

 private:
  const LlamaVersion version_;
  const RequestLimits limits_;
  BatcherOptions steps_options_;
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
