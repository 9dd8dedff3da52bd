// Scanning the repository folder (versioned and flat layouts, version policies, fingerprints) and
// loading one version. The snapshot class is in model_repository.cc.
#include <algorithm>
#include <cctype>
#include <exception>
#include <filesystem>

#include "mha/engine.h"
#include "mha/model_config.h"
#include "server/serving/kinds/model_kind.h"
#include "server/serving/repository/fingerprint.h"
#include "server/serving/repository/model_repository.h"
#include "server/serving/repository/serving_config.h"

namespace fs = std::filesystem;

namespace mha::serve {
namespace {

// `text` with the repository folder's path left out ("/srv/models/enc/x" -> "enc/x").
std::string RelativeToRoot(std::string text, const std::string& root) {
  if (root.empty()) return text;
  const std::string prefix = root.back() == '/' ? root : root + "/";
  for (size_t at = text.find(prefix); at != std::string::npos; at = text.find(prefix, at)) {
    text.erase(at, prefix.size());
  }
  return text;
}

bool IsVersionName(const std::string& name) {
  return !name.empty() && name.size() <= 18 &&
         std::all_of(name.begin(), name.end(), [](char c) { return std::isdigit(c) != 0; }) &&
         std::stoll(name) >= 1;
}

// The numeric version folders of a model folder, ascending.
std::vector<int64_t> VersionFolders(const fs::path& dir) {
  std::vector<int64_t> versions;
  std::error_code ec;
  for (const auto& item : fs::directory_iterator(dir, ec)) {
    const std::string name = item.path().filename().string();
    std::error_code dir_ec;
    if (IsVersionName(name) && fs::is_directory(item.path(), dir_ec)) {
      versions.push_back(std::stoll(name));
    }
  }
  std::sort(versions.begin(), versions.end());
  return versions;
}

std::vector<int64_t> SelectVersions(const VersionPolicy& policy, std::vector<int64_t> found) {
  switch (policy.kind) {
    case VersionPolicy::Kind::kAll:
      return found;
    case VersionPolicy::Kind::kLatest: {
      const size_t keep = std::min<size_t>(found.size(), static_cast<size_t>(policy.num_versions));
      return std::vector<int64_t>(found.end() - static_cast<std::ptrdiff_t>(keep), found.end());
    }
    case VersionPolicy::Kind::kSpecific: {
      std::vector<int64_t> picked;
      for (int64_t v : found) {
        if (std::binary_search(policy.versions.begin(), policy.versions.end(), v)) {
          picked.push_back(v);
        }
      }
      return picked;
    }
  }
  return found;
}

// One version: the config files (model's, then the version folder's) and the weights in `dir`.
ModelEntry ScanVersion(const std::string& root, const std::string& name, const std::string& version,
                       const fs::path& dir, std::vector<std::string> config_paths) {
  ModelEntry entry;
  entry.name = name;
  entry.version = version;
  entry.root = root;
  entry.kind = &KindFor(entry.config);
  auto fail = [&entry, &root](const Status& status) {
    entry.state = ModelState::kFailed;
    entry.error = RelativeToRoot(status.ToString(), root);
    return entry;
  };
  auto config = ReadLayeredServingConfig(config_paths);
  if (!config.ok()) return fail(config.status());
  entry.config = std::move(config.value());
  entry.kind = &KindFor(entry.config);
  if (Status located = entry.kind->Locate(dir, &entry, &config_paths); !located.ok()) {
    return fail(located);
  }
  entry.source = RelativeToRoot(entry.path, root);
  auto fingerprint = FingerprintFiles(config_paths, root);
  if (!fingerprint.ok()) return fail(fingerprint.status());
  entry.fingerprint = *fingerprint;
  return entry;
}

}  // namespace

std::vector<ModelEntry> ScanModel(const std::string& root, const std::string& name) {
  const fs::path dir = fs::path(root) / name;
  const std::string model_config = ModelConfigPathIn(dir.string());
  std::vector<std::string> base;
  if (!model_config.empty()) base.push_back(model_config);
  const std::vector<int64_t> found = VersionFolders(dir);
  if (found.empty()) {  // flat layout: version 1 (or config.json's "version" label)
    ModelEntry entry = ScanVersion(root, name, "1", dir, base);
    if (entry.state != ModelState::kFailed) entry.version = entry.config.version.value_or("1");
    return {std::move(entry)};
  }
  VersionPolicy policy;
  if (!model_config.empty()) {
    auto config = ReadServingConfig(model_config);
    if (!config.ok()) {  // every version fails with the model's config.json error
      std::vector<ModelEntry> failed;
      for (int64_t v : found) {
        failed.push_back(ScanVersion(root, name, std::to_string(v), dir / std::to_string(v), base));
      }
      return failed;
    }
    policy = config->version_policy;
  }
  std::vector<ModelEntry> entries;
  for (int64_t v : SelectVersions(policy, found)) {
    const fs::path version_dir = dir / std::to_string(v);
    std::vector<std::string> paths = base;
    const std::string own = ModelConfigPathIn(version_dir.string());
    if (!own.empty()) paths.push_back(own);
    entries.push_back(ScanVersion(root, name, std::to_string(v), version_dir, paths));
    entries.back().config.version_policy = policy;  // the model's, whatever a version file says
  }
  return entries;
}

StatusOr<std::vector<std::string>> ListModelFolders(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return NotFound("--model-repository " + root + " is not a folder");
  }
  std::vector<std::string> names;
  for (const auto& item : fs::directory_iterator(root, ec)) {
    const std::string name = item.path().filename().string();
    std::error_code dir_ec;
    if (name.empty() || name[0] == '.' || !fs::is_directory(item.path(), dir_ec)) continue;
    names.push_back(name);
  }
  if (ec) return NotFound("cannot list --model-repository " + root + ": " + ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

StatusOr<std::vector<ModelEntry>> ScanRepository(const std::string& root) {
  auto names = ListModelFolders(root);
  if (!names.ok()) return names.status();
  if (names->empty()) {
    return NotFound("--model-repository " + root + " holds no model folder (DIR/<name>/model.*)");
  }
  std::vector<ModelEntry> entries;
  for (const auto& name : *names) {
    for (auto& entry : ScanModel(root, name)) entries.push_back(std::move(entry));
  }
  return entries;
}

void LoadModelEntry(const LoadOverrides& overrides, ModelEntry* entry) {
  if (entry->state != ModelState::kLoading) return;
  const std::string& root = entry->root;
  auto fail = [entry, &root](const Status& status) {
    entry->state = ModelState::kFailed;
    entry->error = RelativeToRoot(status.ToString(), root);
    entry->servable.reset();
  };
  try {
    if (!entry->kind) entry->kind = &KindFor(entry->config);
    if (Status loaded = entry->kind->Load(overrides, entry); !loaded.ok()) return fail(loaded);
    if (Status kv = ChooseKvCacheDtype(overrides, entry); !kv.ok()) return fail(kv);
    entry->state = ModelState::kReady;
  } catch (const std::exception& e) {
    fail(Internal(std::string("loading ") + entry->source + " threw: " + e.what()));
  }
}

const char* ArchitectureOf(const ModelEntry& entry) {
  return (entry.kind ? *entry.kind : KindFor(entry.config)).architecture();
}

}  // namespace mha::serve
