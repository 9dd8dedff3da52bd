#include "server/serving/llama/llama_handle.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "server/serving/llama/llama_requests.h"
#include "server/serving/scheduling/dynamic_batcher.h"
#include "server/serving/server_core.h"

namespace mha::serve {
namespace {

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

LayerStepSchedulerOptions StepOptionsFor(const ServingConfig& config,
                                         const ServerCoreOptions& options) {
  const BatcherOptions b = BatcherOptionsFor(config, options.batcher);
  LayerStepSchedulerOptions o;
  o.max_queue_size = b.max_queue_size;
  o.max_pass_tokens = b.max_batch_tokens;
  o.max_queue_delay_us = b.max_queue_delay_us;
  o.blas = b.blas;
  o.clock = b.clock;
  o.pass_hook = b.pass_hook;
  return o;
}

}  // namespace

std::unique_ptr<PassRunner> MakeLlamaPassRunner(std::shared_ptr<const LlamaAttentionStack> stack) {
  return std::make_unique<LlamaPassRunner>(std::move(stack));
}

std::shared_ptr<ModelHandle> MakeLlamaHandle(ModelEntry entry, const ServerCoreOptions& options,
                                             StatsAggregator* metrics,
                                             std::shared_ptr<SessionDirectory> directory) {
  auto handle = std::make_shared<ModelHandle>();
  handle->metrics = metrics;
  BatcherOptions o = SchedulerOptionsFor(entry.config, /*batching=*/false, options.batcher);
  o.max_batch_work_bytes = options.limits.max_work_bytes;
  handle->scheduling = SchedulerView{o.batching,           o.instances,
                                     o.max_batch_rows,     o.max_batch_tokens,
                                     o.max_queue_delay_us, static_cast<int64_t>(o.max_queue_size)};
  handle->scheduler = std::make_unique<DynamicBatcher>(
      entry.name, MakeBatchModelInfo(entry.info), MakeLlamaPassRunner(entry.llama), o, metrics);
  auto llama = std::make_unique<LlamaHandle>();
  llama->stack = entry.llama;
  SessionOptions sessions = options.sessions;
  sessions.max_work_bytes = options.limits.max_work_bytes;
  sessions.max_response_bytes = options.limits.max_response_bytes;
  llama->sessions = std::make_unique<LlamaSessionStore>(sessions, entry.llama, entry.llama_info,
                                                        SessionLocation{entry.name, entry.version},
                                                        std::move(directory), metrics);
  const LayerStepSchedulerOptions steps = StepOptionsFor(entry.config, options);
  llama->steps =
      LayerStepScheduler::Create(steps, entry.llama, llama->sessions.get(), entry.name, metrics);
  spdlog::info(
      "model {} (llama, {} layers) scheduler: stateless forwards one per pass, queue={} "
      "instances={}; layer steps merged up to {} tokens, delay_us={} queue={}",
      entry.name, entry.llama_info.num_layers, o.max_queue_size, o.instances, steps.max_pass_tokens,
      steps.max_queue_delay_us, steps.max_queue_size);
  handle->llama = std::move(llama);
  handle->entry = std::make_shared<const ModelEntry>(std::move(entry));
  return handle;
}

StatusOr<OpenSessionResponse> OpenLlamaSession(const ModelHandle& handle,
                                               const OpenSessionRequest& request,
                                               const RequestLimits& limits) {
  const ModelEntry& e = *handle.entry;
  auto max_tokens = LlamaSessionMaxTokens(e, request, limits);
  if (!max_tokens.ok()) return max_tokens.status();
  auto info = handle.llama->sessions->Open(*max_tokens, request.session_id);
  if (!info.ok()) return info.status();
  OpenSessionResponse out;
  out.session_id = info->id;
  out.model = e.name;
  out.model_version = e.version;
  out.batch_size = 1;
  out.max_tokens = info->max_tokens;
  out.kv_block_tokens = info->block_tokens;
  out.kv_blocks = info->blocks;
  return out;
}

StatusOr<CloseSessionResponse> CloseLlamaSession(const ModelHandle& handle,
                                                 const std::string& session_id) {
  auto info = handle.llama->sessions->Close(session_id);
  if (!info.ok()) return info.status();
  return CloseSessionResponse{info->tokens, info->blocks};
}

}  // namespace mha::serve
