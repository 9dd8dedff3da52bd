// A Llama-family model version as the serving core routes to it (docs/afd.md): its handle's
// scheduler runs the stateless forwards of one layer each (a DynamicBatcher with one request per
// pass over LlamaPassRunner: requests of different layers never merge), and its LlamaHandle holds
// the sessions and the layer-step scheduler.
#pragma once

#include <memory>

#include "server/serving/inference.h"
#include "server/serving/llama/layer_step_scheduler.h"
#include "server/serving/llama/llama_session_store.h"
#include "server/serving/model_handle.h"
#include "server/serving/scheduling/merge/pass_runner.h"
#include "server/serving/server_core_options.h"

namespace mha::serve {

struct LlamaHandle {
  std::shared_ptr<const LlamaAttentionStack> stack;
  std::unique_ptr<LlamaSessionStore> sessions;
  // After `sessions`: destroyed first, it runs what is queued and releases its sessions.
  std::unique_ptr<LayerStepScheduler> steps;
};

// Stateless forwards of a stack: RunOne runs InferenceTask::layer over its query (LlamaForward);
// merged passes and session steps are INTERNAL (its scheduler runs one request per pass).
std::unique_ptr<PassRunner> MakeLlamaPassRunner(std::shared_ptr<const LlamaAttentionStack> stack);

// The handle of a READY Llama version (entry.llama set): its stateless scheduler (the server's
// batcher options with batching off and config.json's queue size), its sessions (the server's
// session options and limits) and its layer-step scheduler (config.json's / the server's
// max_batch_tokens, max_queue_delay_us and max_queue_size; the batcher's clock, BLAS policy and
// pass hook).
std::shared_ptr<ModelHandle> MakeLlamaHandle(ModelEntry entry, const ServerCoreOptions& options,
                                             StatsAggregator* metrics,
                                             std::shared_ptr<SessionDirectory> directory);

// OpenSession / CloseSession on a Llama version's handle (LlamaSessionMaxTokens's checks).
StatusOr<OpenSessionResponse> OpenLlamaSession(const ModelHandle& handle,
                                               const OpenSessionRequest& request,
                                               const RequestLimits& limits);
StatusOr<CloseSessionResponse> CloseLlamaSession(const ModelHandle& handle,
                                                 const std::string& session_id);

}  // namespace mha::serve
