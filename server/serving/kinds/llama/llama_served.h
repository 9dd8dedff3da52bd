// The serving side of one READY Llama-family version (kinds/model_kind.h ServedModel):
// its sessions (LlamaSessions) and its layer-step scheduler (layer_step_scheduler.h: layer steps
// and stateless forwards in one queue on the one queue/worker core, scheduling/work_queue.h).
#pragma once

#include <memory>

#include "mha/llama_engine.h"
#include "server/serving/kinds/model_kind.h"

namespace mha::serve {

std::unique_ptr<ServedModel> MakeLlamaServed(std::shared_ptr<const LlamaAttentionStack> stack,
                                             const LlamaModelInfo& info, const ModelEntry& entry,
                                             const ServeContext& context);

}  // namespace mha::serve
