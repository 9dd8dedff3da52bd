// config.json of a model folder: the one parse of that file (its nesting bounded before a tree is
// built), with one error policy. Core reads the keys the math needs (shapes, dtype, device,
// prefix); every one is checked for type and range, and an error names the file and the key.
// The other keys are listed in `other_keys` and the parsed object is kept in `json`: the serving
// layer reads its keys from it (server/serving/repository/serving_config.h) and warns about the
// rest.
#pragma once

#include <cstdint>
#include <istream>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "mha/options.h"
#include "mha/status.h"

namespace mha {

struct ModelConfig {
  std::string path;  // "" = no file (every value unset)

  // Loading (the caller's load options win over these, these over what the weights file says).
  std::optional<int64_t> num_heads;
  std::optional<bool> add_zero_attn;
  std::optional<std::string> prefix;
  std::optional<DType> dtype;
  std::optional<std::string> device;
  // Shapes a file may state; they must agree with the weights (checked by the loader).
  std::optional<int64_t> embed_dim, kdim, vdim;
  std::optional<bool> bias, add_bias_kv;

  // The keys core does not read (the serving layer's and unknown ones), sorted.
  std::vector<std::string> other_keys;
  // The file's JSON object as parsed (null when there is no file).
  std::shared_ptr<const nlohmann::json> json;
};

// Reads and checks `path`. NOT_FOUND when it cannot be opened, INVALID_ARGUMENT naming the file
// and the key for anything malformed or out of range.
StatusOr<ModelConfig> ReadModelConfig(const std::string& path);
// The same from text; `path` names it in errors.
StatusOr<ModelConfig> ParseModelConfig(std::istream& in, const std::string& path);
// The same from an object already parsed (several files merged, as the serving layer layers a
// version folder's config.json over its model's); `path` names it in errors.
StatusOr<ModelConfig> ModelConfigFromJson(nlohmann::json object, const std::string& path);

// `dir`/config.json when that file exists, else "".
std::string ModelConfigPathIn(const std::string& dir);

}  // namespace mha
