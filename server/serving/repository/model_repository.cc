#include "server/serving/repository/model_repository.h"

#include <algorithm>
#include <set>

#include "mha/text.h"

namespace mha::serve {
namespace {

bool IsNumber(const std::string& s) {
  return !s.empty() && s.size() <= 18 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool EntryLess(const ModelRepository::EntryPtr& a, const ModelRepository::EntryPtr& b) {
  if (a->name != b->name) return a->name < b->name;
  return VersionLess(a->version, b->version);
}

std::string VersionList(const std::vector<ModelRepository::EntryPtr>& versions) {
  std::string list;
  for (const auto& e : versions) {
    list += (list.empty() ? "" : ", ") + e->version + " " + ModelStateName(e->state);
  }
  return list;
}

}  // namespace

Status ChooseKvCacheDtype(const LoadOverrides& overrides, ModelEntry* entry) {
  const KvCacheDtype asked = entry->config.kv_cache_dtype.value_or(overrides.kv_cache_dtype);
  const std::string where = entry->config.kv_cache_dtype
                                ? entry->config.model.path + ": 'kv_cache_dtype'"
                                : std::string("--kv-cache-dtype");
  if (Status ok = CheckKvCacheDtype(asked, entry->info.device); !ok.ok()) {
    return Status(ok.code(), where + " " + KvCacheDtypeName(asked) + " on " + entry->info.device +
                                 ": " + ok.message());
  }
  entry->kv_cache_dtype = ResolveKvCacheDtype(asked, entry->info.compute_dtype);
  const bool stack = entry->stack.num_layers > 0;  // a stack caches its K/V heads only
  const int64_t heads = stack ? entry->stack.num_key_value_heads : entry->info.options.num_heads;
  const int64_t head_dim = stack ? entry->stack.head_dim : entry->info.options.head_dim();
  entry->kv_bytes_per_token = KvCacheBytesPerToken(entry->kv_cache_dtype, heads, head_dim);
  if (stack) entry->stack.kv_bytes_per_token_per_layer = entry->kv_bytes_per_token;
  return Status::Ok();
}

const char* ModelStateName(ModelState state) {
  switch (state) {
    case ModelState::kLoading:
      return "LOADING";
    case ModelState::kReady:
      return "READY";
    case ModelState::kFailed:
      return "FAILED";
    case ModelState::kUnloading:
      return "UNLOADING";
  }
  return "UNKNOWN";
}

bool VersionLess(const std::string& a, const std::string& b) {
  const bool na = IsNumber(a), nb = IsNumber(b);
  if (na != nb) return na;
  if (na && std::stoll(a) != std::stoll(b)) return std::stoll(a) < std::stoll(b);
  return a < b;
}

StatusOr<std::string> PickDefaultModel(const std::vector<ModelEntry>& entries,
                                       const std::string& requested) {
  std::set<std::string> names;
  for (const auto& e : entries) names.insert(e.name);
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  if (!requested.empty()) {
    if (names.count(requested)) return requested;
    return NotFound("--default-model '" + requested +
                    "' is not in the repository (models: " + list + ")");
  }
  if (names.size() == 1) return *names.begin();
  return std::string();
}

ModelRepository::ModelRepository(std::vector<ModelEntry> entries, std::string default_name)
    : default_name_(std::move(default_name)) {
  entries_.reserve(entries.size());
  for (auto& e : entries) entries_.push_back(std::make_shared<const ModelEntry>(std::move(e)));
  std::stable_sort(entries_.begin(), entries_.end(), EntryLess);
}

ModelRepository::ModelRepository(std::vector<EntryPtr> entries, std::string default_name)
    : entries_(std::move(entries)), default_name_(std::move(default_name)) {
  std::stable_sort(entries_.begin(), entries_.end(), EntryLess);
}

std::vector<ModelRepository::EntryPtr> ModelRepository::Versions(const std::string& name) const {
  std::vector<EntryPtr> versions;
  for (const auto& e : entries_) {
    if (e->name == name) versions.push_back(e);
  }
  return versions;
}

ModelRepository::EntryPtr ModelRepository::Find(const std::string& name,
                                                const std::string& version) const {
  const auto versions = Versions(name.empty() ? default_name_ : name);
  if (versions.empty()) return nullptr;
  if (!version.empty()) {  // READY first: a changed version reloading has its old entry too
    EntryPtr match;
    for (const auto& e : versions) {
      if (e->version == version && (!match || e->state == ModelState::kReady)) match = e;
    }
    return match;
  }
  for (auto it = versions.rbegin(); it != versions.rend(); ++it) {
    if ((*it)->state == ModelState::kReady) return *it;
  }
  for (auto it = versions.rbegin(); it != versions.rend(); ++it) {  // newest non-FAILED, else any
    if ((*it)->state != ModelState::kFailed) return *it;
  }
  return versions.back();
}

StatusOr<ModelRepository::EntryPtr> ModelRepository::Resolve(const std::string& name,
                                                             const std::string& version) const {
  if (name.empty() && default_name_.empty()) {
    return NotFound("no default model: this server has " + std::to_string(model_count()) +
                    " models (" + NameList() +
                    "); name one in the request or start the server with --default-model");
  }
  auto entry = Find(name, version);
  if (!entry) {
    const std::string model = name.empty() ? default_name_ : name;
    const auto versions = Versions(model);
    if (versions.empty()) {
      return NotFound("model '" + Abbreviate(model) + "' not found; available: " + NameList());
    }
    return NotFound("model '" + model + "' has no version '" + Abbreviate(version) +
                    "' (model_version); versions: " + VersionList(versions));
  }
  const std::string what = "model '" + entry->name + "' version " + entry->version;
  switch (entry->state) {
    case ModelState::kReady:
      return entry;
    case ModelState::kLoading:
      return Unavailable(what + " is still loading");
    case ModelState::kUnloading:
      return Unavailable(what + " is unloading");
    case ModelState::kFailed:
      return FailedPrecondition(what + " failed to load: " + entry->error);
  }
  return Internal("unknown model state");
}

size_t ModelRepository::ready_count() const {
  std::set<std::string> ready;
  for (const auto& e : entries_) {
    if (e->state == ModelState::kReady) ready.insert(e->name);
  }
  return ready.size();
}

bool ModelRepository::Ready() const {
  for (const auto& entry : entries_) {
    if (entry->state == ModelState::kLoading) return false;
  }
  return ready_count() > 0;
}

size_t ModelRepository::model_count() const {
  std::set<std::string> names;
  for (const auto& e : entries_) names.insert(e->name);
  return names.size();
}

std::string ModelRepository::NameList() const {
  std::string names;
  std::string last;
  for (const auto& e : entries_) {
    if (e->name == last) continue;
    last = e->name;
    names += (names.empty() ? "" : ", ") + e->name;
  }
  return names.empty() ? "(none)" : names;
}

}  // namespace mha::serve
