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

// Which numeric version folders of a model are served (Triton's version_policy).
struct VersionPolicy {
  enum class Kind { kLatest, kAll, kSpecific };
  Kind kind = Kind::kLatest;
  int64_t num_versions = 1;       // kLatest: the N highest versions
  std::vector<int64_t> versions;  // kSpecific: exactly these (sorted, unique)
};

// One warmup pass run on a freshly loaded version before it is READY: self-attention on a
// deterministic query [batch, seq, E].
struct WarmupShape {
  int64_t batch = 1;
  int64_t seq = 16;
  bool need_weights = false;
};

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

  // Lifecycle: the model's version policy (read from the model folder's config.json; a version
  // folder's own config.json cannot change it) and the warmup passes.
  VersionPolicy version_policy;
  std::vector<WarmupShape> warmup;
  // Whether a file states "warmup" at all: without the key the server runs its default warmup
  // (DefaultWarmup in server_core_lifecycle.cc); "warmup": [] turns warmup off.
  bool warmup_given = false;

  std::vector<std::string> unknown_keys;
};

// Reads and checks `path`. NOT_FOUND when it cannot be opened, INVALID_ARGUMENT naming the file
// and the key for anything malformed or out of range.
StatusOr<ModelConfig> ReadModelConfig(const std::string& path);
// The same from text; `path` names it in errors.
StatusOr<ModelConfig> ParseModelConfig(std::istream& in, const std::string& path);

// Several config.json files, later ones overriding earlier ones key by key (a version folder's
// over its model's). Each file is checked alone first, so an error names the file that has it.
// Empty `paths` = every value unset.
StatusOr<ModelConfig> ReadLayeredModelConfig(const std::vector<std::string>& paths);

// `dir`/config.json when that file exists, else "".
std::string ModelConfigPathIn(const std::string& dir);

}  // namespace mha
