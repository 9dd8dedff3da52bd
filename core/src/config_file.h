// Private to mha_core: config.json beside a weights file, as LoadWeights reads it (loader.cc).
#pragma once

#include <cstdint>
#include <istream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "mha/options.h"
#include "mha/status.h"

namespace mha::internal {

// The keys of config.json that LoadWeights reads (others are ignored).
struct ConfigFile {
  std::string path;  // empty: no config
  std::optional<int64_t> num_heads;
  std::optional<bool> add_zero_attn;
  std::optional<std::string> prefix;
  std::optional<DType> dtype;
  std::optional<std::string> device;
  nlohmann::json json;
};

// Parses config text from `in`; `path` names it in errors and is kept in config->path.
Status ParseConfig(const std::string& path, std::istream& in, ConfigFile* config);

// config.json may also state the shapes; they must agree with what the tensors say.
Status CheckConfigShapes(const ConfigFile& config, const MhaOptions& options);

}  // namespace mha::internal
