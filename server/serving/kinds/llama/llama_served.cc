#include "server/serving/kinds/llama/llama_served.h"

#include <spdlog/spdlog.h>

#include <string>
#include <utility>
#include <vector>

#include "mha/text.h"
#include "server/serving/kinds/llama/layer_step_scheduler.h"
#include "server/serving/kinds/llama/llama_requests.h"
#include "server/serving/kinds/llama/llama_sessions.h"
#include "server/serving/kinds/serve_options.h"
#include "server/serving/observability/stats_aggregator.h"
#include "server/serving/repository/model_repository.h"
#include "server/serving/server_core_options.h"

namespace mha::serve {
namespace {

// What a gather copies per cached key of a layer before decoding it: the stored bytes of a cache
// in another dtype than the compute one (LlamaVersion::cache_bytes_per_key), else 0.
int64_t CacheBytesPerKey(const ModelEntry& entry, const LlamaModelInfo& info) {
  const bool decoded =
      entry.kv_cache_dtype != ResolveKvCacheDtype(KvCacheDtype::kModel, info.compute_dtype);
  return decoded ? entry.kv_bytes_per_token : 0;
}

class LlamaServed final : public ServedModel, public LayerStepper {
 public:
  LlamaServed(std::shared_ptr<const LlamaAttentionStack> stack, const LlamaModelInfo& info,
              const ModelEntry& entry, const ServeContext& context)
      : version_{entry.name, entry.version, info, CacheBytesPerKey(entry, info)},
        limits_(context.options->limits) {
    const ServerCoreOptions& options = *context.options;
    if (context.metrics != nullptr) context.metrics->SetKvBytesPerToken(entry.kv_bytes_per_token);
    sessions_ = std::make_unique<LlamaSessions>(
        SessionOptionsFor(entry, options.sessions), limits_, stack, info,
        SessionLocation{entry.name, entry.version, entry.fingerprint}, context.directory,
        context.metrics);
    // One queue for the version: layer steps merge (same layer, up to max_batch_tokens new
    // tokens) unless batching is off; stateless forwards run one per pass.
    steps_options_ = SchedulerOptionsFor(entry.config, options.batching, options.batcher);
    steps_ = LayerStepScheduler::Create(steps_options_, stack, sessions_.get(), entry.name,
                                        context.metrics);
    if (steps_options_.batching) {
      spdlog::info(
          "model {} (llama, {} layers) scheduler: one queue={} instances={}; layer steps merged "
          "up to {} new tokens, delay_us={}; stateless forwards one per pass",
          entry.name, info.num_layers, steps_options_.max_queue_size, steps_options_.instances,
          steps_options_.max_batch_tokens, steps_options_.max_queue_delay_us);
    } else {
      spdlog::info(
          "model {} (llama, {} layers) scheduler: one message or forward per pass, queue={} "
          "instances={}",
          entry.name, info.num_layers, steps_options_.max_queue_size, steps_options_.instances);
    }
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

  Sessions* sessions() override { return sessions_.get(); }
  LayerStepper* layer_steps() override { return this; }

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
    CallerThread caller;  // a message's turn only queues it: nothing blocks here
    return sessions_->Acquire(
        ids, [](size_t i) { return "entries[" + std::to_string(i) + "].session_id: "; },
        [this, task](LlamaSessions::Hold hold, CallerThread&) {
          task->hold = std::move(hold);
          steps_->Submit(std::move(*task));
        },
        [task](Status why) {
          LayerStepDone answer = std::move(task->done);
          *task = LayerStepTask();  // drop the inputs (they may borrow the message) first
          LayerStepResponse response;
          response.status = std::move(why);
          answer(std::move(response));
        },
        caller);
  }

 private:
  const LlamaVersion version_;
  const RequestLimits limits_;
  BatcherOptions steps_options_;
  std::unique_ptr<LlamaSessions> sessions_;
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
