// The serving side of one READY one-layer MHA version (kinds/model_kind.h ServedModel): its
// DynamicBatcher (batching on or off) and its SessionStore, whose steps go through the batcher.
#pragma once

#include <memory>

#include "mha/engine.h"
#include "server/serving/kinds/model_kind.h"

namespace mha::serve {

std::unique_ptr<ServedModel> MakeMultiheadServed(std::shared_ptr<const MhaModel> model,
                                                 const ModelEntry& entry,
                                                 const ServeContext& context);

}  // namespace mha::serve
