// The models a server answers for. A repository folder holds one sub-folder per model, either
// versioned (Triton's layout) or flat (= version 1):
//   DIR/<name>/config.json + DIR/<name>/<N>/{[config.json], <weights>}   N = 1, 2, ... (numeric)
//   DIR/<name>/{config.json, <weights>}
// where <weights> is model.safetensors / model.pt / any other single model.* file, or else the only
// non-JSON file there. A version folder's config.json overrides the model's key by key; the
// model's "version_policy" picks the versions served (default: the newest one). Formats are
// detected by content (mha::LoadWeights). A version that cannot be loaded is kept as FAILED with
// its error; the others serve. Immutable once built: the service swaps whole snapshots.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mha/engine.h"
#include "mha/kv_cache_dtype.h"
#include "mha/options.h"
#include "mha/status.h"
#include "server/serving/repository/serving_config.h"

namespace mha::serve {

enum class ModelState { kLoading, kReady, kFailed, kUnloading };
const char* ModelStateName(ModelState state);

class ModelKind;  // kinds/model_kind.h
class Servable;   // kinds/model_kind.h

// What protocols show of a multi-layer stack beyond the one-layer view in ModelInfo (0 = not a
// stack: the fields are left out).
struct StackInfo {
  int64_t num_layers = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t max_positions = 0;
  double rope_theta = 0;
  int64_t kv_bytes_per_token_per_layer = 0;
};

struct ModelEntry {
  std::string name;
  // The version folder's number; flat layout: config.json "version" when present, else "1".
  std::string version = "1";
  ServingConfig config;  // the folder's config.json (model.path "" when it has none)
  ModelState state = ModelState::kLoading;
  std::string error;  // why it FAILED
  // Its kind (kinds/model_kind.h): set by the scan, never null after it.
  const ModelKind* kind = nullptr;
  // The loaded version (set when READY): what the lifecycle warms up and each handle serves.
  std::shared_ptr<const Servable> servable;
  // The one-layer view every protocol reads (E, H, kdim/vdim, dtypes, device; when READY), and
  // what a multi-layer stack adds to it.
  ModelInfo info;
  StackInfo stack;
  // How the version's sessions store their KV cache (config.json "kv_cache_dtype" over
  // --kv-cache-dtype, resolved: never kModel) and what a token of one layer takes there, scales
  // included (when READY).
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kFloat32;
  int64_t kv_bytes_per_token = 0;
  // The weights file relative to the repository ("enc/model.pt"), or "builtin": what callers see.
  // Errors are worded with relative paths too; no absolute path leaves the server.
  std::string source;
  std::string path;    // the weights file's absolute path, for loading only
  std::string format;  // "safetensors", "torch_save", "torchscript", "builtin"
  std::string layout;
  std::vector<std::string> unused_keys;
  // Content hash of the version's files (weights and config.json files): a reload loads a
  // version again only when it changed (repository/fingerprint.h).
  std::string fingerprint;
  std::string root;  // the repository folder (absolute), to word errors relative to it
  // Warmup passes run on this version's load before it was READY: config.json's "warmup", or
  // the default warmup when the config has no such key (the built-in model included).
  int64_t warmup_passes = 0;
};

// What ModelInfo.architecture says of the version: its kind's ("multihead_attention", ...).
const char* ArchitectureOf(const ModelEntry& entry);

// Versions order numerically ("10" after "9"); non-numeric labels after numeric ones.
bool VersionLess(const std::string& a, const std::string& b);

struct LoadOverrides {  // server flags that win over each config.json
  std::optional<DType> dtype;
  std::optional<std::string> device;
  bool cuda_graphs = true;  // --cuda-graphs: small passes on a GPU replay captured CUDA graphs
  // --kv-cache-dtype: the default of the versions whose config.json has no "kv_cache_dtype".
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kModel;
};

// After a version's load: its KV cache dtype (config.json's over the flag) checked against its
// device, then set with its bytes per token (entry->kv_cache_dtype, kv_bytes_per_token; a stack's
// kv_bytes_per_token_per_layer too). FAILED_PRECONDITION naming where the dtype came from and why
// the device or build lacks it (fp8_e4m3 on a CPU, or on a LibTorch without float8).
Status ChooseKvCacheDtype(const LoadOverrides& overrides, ModelEntry* entry);

// One model folder DIR/<name>: the versions its version_policy selects, each LOADING, or FAILED
// with the reason (bad config.json, no weights file). Sorted by version. Empty when the folder
// has numeric version folders but the policy selects none of them.
std::vector<ModelEntry> ScanModel(const std::string& root, const std::string& name);

// The model folder names in DIR (sorted). Error when DIR is not a readable folder.
StatusOr<std::vector<std::string>> ListModelFolders(const std::string& root);

// Every model of DIR (ScanModel of each, sorted by name then version). Error when DIR is not a
// readable folder or holds no model folder.
StatusOr<std::vector<ModelEntry>> ScanRepository(const std::string& root);

// Loads one LOADING entry in place: READY with its model, or FAILED with the error.
void LoadModelEntry(const LoadOverrides& overrides, ModelEntry* entry);

// The default model's name: `requested` when given (error listing the names when unknown), else
// the only model, else "" (requests must then name their model).
StatusOr<std::string> PickDefaultModel(const std::vector<ModelEntry>& entries,
                                       const std::string& requested);

class ModelRepository {
 public:
  using EntryPtr = std::shared_ptr<const ModelEntry>;
  ModelRepository(std::vector<ModelEntry> entries, std::string default_name);
  // Sorts `entries` by name, then version.
  ModelRepository(std::vector<EntryPtr> entries, std::string default_name);

  // name "" = the default model; version "" = its newest READY version. NOT_FOUND (listing the
  // names, or the model's versions) for unknown names and versions or when there is no default;
  // UNAVAILABLE while LOADING or UNLOADING; FAILED_PRECONDITION for a FAILED version.
  StatusOr<EntryPtr> Resolve(const std::string& name, const std::string& version = "") const;
  // Like Resolve but any state (version "": the newest READY one, else the newest); nullptr when
  // unknown.
  EntryPtr Find(const std::string& name, const std::string& version = "") const;
  // Every version of `name` (sorted), any state.
  std::vector<EntryPtr> Versions(const std::string& name) const;

  const std::vector<EntryPtr>& entries() const { return entries_; }
  const std::string& default_name() const { return default_name_; }
  size_t ready_count() const;  // models with a READY version
  // Every model has finished loading and one of them is READY: health SERVING, ServerReady and
  // /v2/health/ready unless the app passes its own health state.
  bool Ready() const;
  size_t model_count() const;    // distinct names
  std::string NameList() const;  // "a, b, c"

 private:
  std::vector<EntryPtr> entries_;
  std::string default_name_;
};

}  // namespace mha::serve
