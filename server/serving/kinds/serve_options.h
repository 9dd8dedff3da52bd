// How a version's config.json is laid over the server's scheduler and session flags, once, for
// every kind (config.json's keys win), and what SchedulerView reports of the result.
#pragma once

#include "server/serving/inference_server.h"
#include "server/serving/repository/serving_config.h"
#include "server/serving/scheduling/batcher_options.h"
#include "server/serving/sessions/session_options.h"

namespace mha::serve {

struct ModelEntry;  // repository/model_repository.h

// The batcher settings of one model: its config.json keys over the server's flags.
BatcherOptions BatcherOptionsFor(const ServingConfig& config, const BatcherOptions& defaults);
// The scheduler of one model as it runs: BatcherOptionsFor, batching on or off (off: one request
// per pass; instances and the queue size still apply).
BatcherOptions SchedulerOptionsFor(const ServingConfig& config, bool batching,
                                   const BatcherOptions& defaults);
// A version's session options: the server's, its pool in the version's KV cache dtype
// (ModelEntry::kv_cache_dtype, chosen at load).
SessionOptions SessionOptionsFor(const ModelEntry& entry, const SessionOptions& defaults);

// What ModelConfig / the REST config / ServerCore::Scheduling show of `options`.
SchedulerView ViewOf(const BatcherOptions& options);

}  // namespace mha::serve
