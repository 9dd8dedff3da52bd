// The models a server answers for. A repository folder holds one sub-folder per model:
//   DIR/<name>/{config.json, <weights>}
// where <weights> is model.safetensors / model.pt / any other single model.* file, or else the only
// non-JSON file there. Formats are detected by content (mha::LoadWeights). A model that cannot be
// loaded is kept as FAILED with its error; the others serve. Immutable once built: the service
// swaps whole snapshots (LOADING -> READY/FAILED).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mha/model.h"
#include "mha/model_config.h"
#include "mha/options.h"
#include "mha/status.h"

namespace mha::serve {

enum class ModelState { kLoading, kReady, kFailed };
const char* ModelStateName(ModelState state);

struct ModelEntry {
  std::string name;
  std::string version = "1";  // config.json "version" when present
  ModelConfig config;         // the folder's config.json (path "" when it has none)
  ModelState state = ModelState::kLoading;
  std::string error;                      // why it FAILED
  std::shared_ptr<const MhaModel> model;  // set when READY
  // The weights file relative to the repository ("enc/model.pt"), or "builtin": what callers see.
  // Errors are worded with relative paths too; no absolute path leaves the server.
  std::string source;
  std::string path;    // the weights file's absolute path, for loading only
  std::string format;  // "safetensors", "torch_save", "torchscript", "builtin"
  std::string layout;
  std::vector<std::string> unused_keys;
};

struct LoadOverrides {  // server flags that win over each config.json
  std::optional<DType> dtype;
  std::optional<std::string> device;
};

// One model folder: its config.json (read and checked once, here) and its weights file; FAILED
// with the reason when either is unusable, else LOADING.
ModelEntry ScanModelFolder(const std::string& name, const std::filesystem::path& dir);

// Lists DIR's model folders (sorted by name) in state LOADING, or FAILED when no weights file
// can be picked. Error when DIR is not a readable folder or holds no model folder.
StatusOr<std::vector<ModelEntry>> ScanRepository(const std::string& root);

// Loads one LOADING entry in place: READY with its model, or FAILED with the error.
void LoadModelEntry(const LoadOverrides& overrides, ModelEntry* entry);

// The default model's name: `requested` when given (error listing the names when unknown), else
// the only model, else "" (requests must then name their model).
StatusOr<std::string> PickDefaultModel(const std::vector<ModelEntry>& entries,
                                       const std::string& requested);

class ModelRepository {
 public:
  ModelRepository(std::vector<ModelEntry> entries, std::string default_name);

  // name "" = the default model. NOT_FOUND (listing the names) for unknown names or when there is
  // no default; UNAVAILABLE while LOADING; FAILED_PRECONDITION for a FAILED model.
  StatusOr<std::shared_ptr<const ModelEntry>> Resolve(const std::string& name) const;
  // Like Resolve but any state; nullptr when unknown.
  std::shared_ptr<const ModelEntry> Find(const std::string& name) const;

  const std::vector<std::shared_ptr<const ModelEntry>>& entries() const { return entries_; }
  const std::string& default_name() const { return default_name_; }
  size_t ready_count() const;
  std::string NameList() const;  // "a, b, c"

 private:
  std::vector<std::shared_ptr<const ModelEntry>> entries_;
  std::string default_name_;
};

}  // namespace mha::serve
