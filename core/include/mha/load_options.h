// What LoadWeights / LoadModel read (mha/loader.h, mha/engine.h). Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "mha/model_config.h"
#include "mha/options.h"

namespace mha {

struct LoadOptions {
  std::string path;  // weights file
  // Picks one layer out of a bigger checkpoint, with or without the trailing dot
  // ("encoder.layers.3.self_attn" == "encoder.layers.3.self_attn.").
  std::string prefix;
  // Defaults to config.json beside the weights file when that exists; "" and no file = none.
  std::string config_path;
  // An already read config.json (ReadModelConfig): used instead of reading config_path.
  const ModelConfig* config = nullptr;
  // Caller's values win over config.json; config.json wins over what the file carries.
  std::optional<int64_t> num_heads;
  std::optional<bool> add_zero_attn;
  std::optional<DType> dtype;
  std::optional<std::string> device;
  bool cuda_graphs = true;  // MhaOptions::cuda_graphs
};

}  // namespace mha
