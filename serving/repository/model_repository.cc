#include "serving/repository/model_repository.h"

#include <algorithm>
#include <exception>
#include <filesystem>

#include "mha/loader.h"
#include "mha/model_config.h"
#include "mha/text.h"

namespace fs = std::filesystem;

namespace mha::serve {
namespace {

bool IsRegularFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);  // follows symlinks
}

// Picks the weights file of one model folder, or explains why none can be picked.
StatusOr<std::string> PickWeightsFile(const fs::path& dir) {
  std::vector<std::string> model_files, other_files;
  std::error_code ec;
  for (const auto& item : fs::directory_iterator(dir, ec)) {
    const std::string name = item.path().filename().string();
    if (name.empty() || name[0] == '.' || !IsRegularFile(item.path())) continue;
    if (item.path().extension() == ".json") continue;
    if (item.path().stem() == "model") {
      model_files.push_back(name);
    } else {
      other_files.push_back(name);
    }
  }
  if (ec) return NotFound("cannot list " + dir.string() + ": " + ec.message());
  std::sort(model_files.begin(), model_files.end());
  std::sort(other_files.begin(), other_files.end());
  auto join = [](const std::vector<std::string>& names) {
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
    return s;
  };
  if (model_files.size() == 1) return (dir / model_files[0]).string();
  if (model_files.size() > 1) {
    return InvalidArgument(dir.string() + ": several weights files (" + join(model_files) +
                           "); keep one model.* file");
  }
  if (other_files.size() == 1) return (dir / other_files[0]).string();
  if (other_files.empty()) {
    return NotFound(dir.string() + ": no weights file (expected model.safetensors, model.pt, ...)");
  }
  return InvalidArgument(dir.string() + ": cannot tell the weights file among " +
                         join(other_files) + "; name it model.<ext>");
}

}  // namespace

const char* ModelStateName(ModelState state) {
  switch (state) {
    case ModelState::kLoading:
      return "LOADING";
    case ModelState::kReady:
      return "READY";
    case ModelState::kFailed:
      return "FAILED";
  }
  return "UNKNOWN";
}

// `text` with the repository folder's path left out ("/srv/models/enc/x" -> "enc/x").
static std::string RelativeToRoot(std::string text, const std::string& root) {
  if (root.empty()) return text;
  const std::string prefix = root.back() == '/' ? root : root + "/";
  for (size_t at = text.find(prefix); at != std::string::npos; at = text.find(prefix, at)) {
    text.erase(at, prefix.size());
  }
  return text;
}

ModelEntry ScanModelFolder(const std::string& name, const std::filesystem::path& dir) {
  ModelEntry entry;
  entry.name = name;
  const std::string root = dir.parent_path().string();
  auto fail = [&entry, &root](const Status& status) {
    entry.state = ModelState::kFailed;
    entry.error = RelativeToRoot(status.ToString(), root);
    return entry;
  };
  const std::string config_path = ModelConfigPathIn(dir.string());
  if (!config_path.empty()) {
    auto config = ReadModelConfig(config_path);
    if (!config.ok()) return fail(config.status());
    entry.config = std::move(config.value());
    entry.version = entry.config.version.value_or("1");
  }
  auto weights = PickWeightsFile(dir);
  if (!weights.ok()) return fail(weights.status());
  entry.path = *weights;
  entry.source = RelativeToRoot(*weights, root);
  return entry;
}

StatusOr<std::vector<ModelEntry>> ScanRepository(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return NotFound("--model-repository " + root + " is not a folder");
  }
  std::vector<ModelEntry> entries;
  for (const auto& item : fs::directory_iterator(root, ec)) {
    const std::string name = item.path().filename().string();
    std::error_code dir_ec;
    if (name.empty() || name[0] == '.' || !fs::is_directory(item.path(), dir_ec)) continue;
    entries.push_back(ScanModelFolder(name, item.path()));
  }
  if (ec) return NotFound("cannot list --model-repository " + root + ": " + ec.message());
  if (entries.empty()) {
    return NotFound("--model-repository " + root + " holds no model folder (DIR/<name>/model.*)");
  }
  std::sort(entries.begin(), entries.end(),
            [](const ModelEntry& a, const ModelEntry& b) { return a.name < b.name; });
  return entries;
}

void LoadModelEntry(const LoadOverrides& overrides, ModelEntry* entry) {
  if (entry->state != ModelState::kLoading) return;
  const std::string root = std::filesystem::path(entry->path).parent_path().parent_path().string();
  auto fail = [entry, &root](const Status& status) {
    entry->state = ModelState::kFailed;
    entry->error = RelativeToRoot(status.ToString(), root);
    entry->model.reset();
  };
  try {
    LoadOptions options;
    options.path = entry->path;
    options.config = &entry->config;  // read once, at scan time
    options.dtype = overrides.dtype;
    options.device = overrides.device;
    auto loaded = LoadWeights(options);
    if (!loaded.ok()) return fail(loaded.status());
    entry->format = WeightsFormatName(loaded->format);
    entry->layout = loaded->layout;
    entry->unused_keys = loaded->unused_keys;
    auto model = MhaModel::Create(loaded->options, std::move(loaded->weights));
    if (!model.ok()) return fail(model.status());
    entry->model = std::shared_ptr<const MhaModel>(std::move(model.value()));
    entry->state = ModelState::kReady;
  } catch (const std::exception& e) {
    fail(Internal(std::string("loading ") + entry->source + " threw: " + e.what()));
  }
}

StatusOr<std::string> PickDefaultModel(const std::vector<ModelEntry>& entries,
                                       const std::string& requested) {
  std::string names;
  for (const auto& e : entries) names += (names.empty() ? "" : ", ") + e.name;
  if (!requested.empty()) {
    for (const auto& e : entries) {
      if (e.name == requested) return requested;
    }
    return NotFound("--default-model '" + requested +
                    "' is not in the repository (models: " + names + ")");
  }
  if (entries.size() == 1) return entries[0].name;
  return std::string();
}

ModelRepository::ModelRepository(std::vector<ModelEntry> entries, std::string default_name)
    : default_name_(std::move(default_name)) {
  entries_.reserve(entries.size());
  for (auto& e : entries) entries_.push_back(std::make_shared<const ModelEntry>(std::move(e)));
}

std::shared_ptr<const ModelEntry> ModelRepository::Find(const std::string& name) const {
  const std::string& wanted = name.empty() ? default_name_ : name;
  for (const auto& e : entries_) {
    if (e->name == wanted) return e;
  }
  return nullptr;
}

StatusOr<std::shared_ptr<const ModelEntry>> ModelRepository::Resolve(
    const std::string& name) const {
  if (name.empty() && default_name_.empty()) {
    return NotFound("no default model: this server has " + std::to_string(entries_.size()) +
                    " models (" + NameList() +
                    "); name one in the request or start the server with --default-model");
  }
  auto entry = Find(name);
  if (!entry) {
    return NotFound("model '" + Abbreviate(name) + "' not found; available: " + NameList());
  }
  switch (entry->state) {
    case ModelState::kReady:
      return entry;
    case ModelState::kLoading:
      return Unavailable("model '" + entry->name + "' is still loading");
    case ModelState::kFailed:
      return FailedPrecondition("model '" + entry->name + "' failed to load: " + entry->error);
  }
  return Internal("unknown model state");
}

size_t ModelRepository::ready_count() const {
  return static_cast<size_t>(std::count_if(entries_.begin(), entries_.end(), [](const auto& e) {
    return e->state == ModelState::kReady;
  }));
}

std::string ModelRepository::NameList() const {
  std::string names;
  for (const auto& e : entries_) names += (names.empty() ? "" : ", ") + e->name;
  return names.empty() ? "(none)" : names;
}

}  // namespace mha::serve
