// config.json of a model folder: the one reader of that file, with one error policy. Every known
// key is checked for type and range, and an error names the file and the key; unknown keys are
// listed (callers warn). The loader uses the loading keys, the serving layer the others.
#pragma once

#include <cstdint>
#include <istream>
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

  // Serving: the version label and the model's scheduler settings (override the server flags).
  std::optional<std::string> version;
  std::optional<int64_t> max_batch_size;  // rows (sum of B) of one merged pass
  std::optional<int64_t> max_batch_tokens;
  std::optional<int64_t> max_queue_delay_us;
  std::optional<int64_t> max_queue_size;
  std::optional<int64_t> instances;

  std::vector<std::string> unknown_keys;
};

// Reads and checks `path`. NOT_FOUND when it cannot be opened, INVALID_ARGUMENT naming the file
// and the key for anything malformed or out of range.
StatusOr<ModelConfig> ReadModelConfig(const std::string& path);
// The same from text; `path` names it in errors.
StatusOr<ModelConfig> ParseModelConfig(std::istream& in, const std::string& path);

// `dir`/config.json when that file exists, else "".
std::string ModelConfigPathIn(const std::string& dir);

}  // namespace mha
