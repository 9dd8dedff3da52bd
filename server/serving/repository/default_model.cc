#include "server/serving/repository/default_model.h"

#include <exception>

namespace mha::serve {

ModelEntry MakeDefaultModel(const LoadOverrides& overrides) {
  ModelEntry entry;
  entry.name = kDefaultModelName;
  entry.source = "builtin";
  MhaOptions options;
  options.embed_dim = kDefaultEmbedDim;
  options.num_heads = kDefaultNumHeads;
  if (overrides.dtype) options.dtype = *overrides.dtype;
  if (overrides.device) options.device = *overrides.device;
  options.cuda_graphs = overrides.cuda_graphs;
  auto model = BuildDefaultModel(options);
  if (!model.ok()) {
    entry.state = ModelState::kFailed;
    entry.error = model.status().ToString();
    return entry;
  }
  entry.format = model->format;
  entry.layout = model->layout;
  entry.model = std::move(model->model);
  entry.info = model->info;
  entry.state = ModelState::kReady;
  return entry;
}

}  // namespace mha::serve
