// The serving keys of a model folder's config.json: the version label, the model's scheduler
// settings, its version policy and warmup passes. Core parses the file once (mha/model_config.h,
// the keys the math needs) and keeps the parsed object; these are read from that object, with
// the same error policy (an error names the file and the key). Keys that neither reads are
// listed in `unknown_keys` (the lifecycle warns about them).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mha/kv_cache_dtype.h"
#include "mha/model_config.h"
#include "mha/status.h"

namespace mha::serve {

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

struct ServingConfig {
  ModelConfig model;  // core's keys (the loader's), the file's path and its parsed object

  // The version label and the model's scheduler settings (override the server flags).
  std::optional<std::string> version;
  std::optional<int64_t> max_batch_rows;  // rows (sum of B) of one merged pass (--max-batch-rows)
  std::optional<int64_t> max_batch_tokens;
  std::optional<int64_t> max_queue_delay_us;
  std::optional<int64_t> max_queue_size;
  std::optional<int64_t> instances;
  // How the version's sessions store their KV cache (over --kv-cache-dtype; mha/kv_cache_dtype.h).
  std::optional<KvCacheDtype> kv_cache_dtype;

  // Lifecycle: the model's version policy (read from the model folder's config.json; a version
  // folder's own config.json cannot change it) and the warmup passes.
  VersionPolicy version_policy;
  std::vector<WarmupShape> warmup;
  // Whether a file states "warmup" at all: without the key the server runs its default warmup
  // (DefaultWarmup in lifecycle/model_lifecycle.cc); "warmup": [] turns warmup off.
  bool warmup_given = false;

  std::vector<std::string> unknown_keys;  // neither core's nor these (sorted)
};

// The serving keys of a config core has read (`model.json`; none when it is null).
StatusOr<ServingConfig> ServingConfigFrom(ModelConfig model);
// ReadModelConfig(path) and the serving keys: NOT_FOUND when it cannot be opened,
// INVALID_ARGUMENT naming the file and the key for anything malformed or out of range.
StatusOr<ServingConfig> ReadServingConfig(const std::string& path);

// Several config.json files, later ones overriding earlier ones key by key (a version folder's
// over its model's). Each file is checked alone first, so an error names the file that has it.
// Empty `paths` = every value unset.
StatusOr<ServingConfig> ReadLayeredServingConfig(const std::vector<std::string>& paths);

}  // namespace mha::serve
