// ModelLifecycle's reload of one model: rescan, plan (what stays, what loads), load beside what
// serves, switch, retire (model_lifecycle.h).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "server/serving/lifecycle/model_lifecycle.h"

namespace fs = std::filesystem;

namespace mha::serve {
namespace {

using EntryPtr = ModelRepository::EntryPtr;

// A rescan of one model against what is served.
struct ReloadPlan {
  std::vector<EntryPtr> entries;  // versions kept as they are
  std::map<std::pair<std::string, std::string>, std::shared_ptr<ModelHandle>> handles;  // kept
  std::vector<ModelEntry> to_load;  // new or changed versions (LOADING)
  std::vector<ModelEntry> failed;   // versions whose scan failed (config.json, no weights)
  bool changed = false;
};

// The repository entry of one version (not an UNLOADING one), or nullptr.
EntryPtr Served(const std::vector<EntryPtr>& versions, const std::string& version) {
  for (const auto& e : versions) {
    if (e->version == version && e->state != ModelState::kUnloading) return e;
  }
  return nullptr;
}

// A failed rollout never takes the old version down: while a version the policy selects is
// FAILED, the READY versions it would replace keep serving (marked so in their error).
template <typename Handles>
void KeepOldWhileFailing(const std::vector<EntryPtr>& current, const Handles& old_handles,
                         std::vector<EntryPtr>* entries, Handles* handles) {
  const bool failing = std::any_of(entries->begin(), entries->end(), [](const EntryPtr& e) {
    return e->state == ModelState::kFailed;
  });
  if (!failing) return;
  for (const auto& [key, handle] : old_handles) {
    if (handles->count(key)) continue;
    (*handles)[key] = handle;
    EntryPtr shown = Served(current, key.second);
    if (!shown || shown->error.empty()) {
      ModelEntry kept = *handle->entry;
      kept.error = "kept serving: the newer version that version_policy selects failed to load";
      shown = std::make_shared<const ModelEntry>(std::move(kept));
    }
    entries->push_back(shown);
  }
}

}  // namespace

// Without retry_failed (polling), a version whose files are the ones that failed last time is
// not loaded again: it stays FAILED (or the version before it keeps serving) until they change.
static ReloadPlan PlanReload(
    const std::string& name, std::vector<ModelEntry> desired, const std::vector<EntryPtr>& current,
    const std::map<std::pair<std::string, std::string>, std::shared_ptr<ModelHandle>>& handles,
    bool retry_failed) {
  ReloadPlan plan;
  for (auto& d : desired) {
    const auto key = std::make_pair(name, d.version);
    auto h = handles.find(key);
    const EntryPtr old = Served(current, d.version);
    if (h != handles.end() && d.state != ModelState::kFailed &&
        h->second->entry->fingerprint == d.fingerprint) {
      plan.handles[key] = h->second;
      plan.entries.push_back(h->second->entry);
    } else if (!retry_failed && old && !old->error.empty() && old->fingerprint == d.fingerprint &&
               (d.state != ModelState::kFailed || d.error == old->error)) {
      if (h != handles.end()) plan.handles[key] = h->second;
      plan.entries.push_back(old);
    } else {
      (d.state == ModelState::kFailed ? plan.failed : plan.to_load).push_back(std::move(d));
    }
  }
  KeepOldWhileFailing(current, handles, &plan.entries, &plan.handles);
  std::sort(plan.entries.begin(), plan.entries.end(), [](const EntryPtr& a, const EntryPtr& b) {
    return VersionLess(a->version, b->version);
  });
  std::vector<EntryPtr> before;
  for (const auto& e : current) {
    if (e->state != ModelState::kUnloading) before.push_back(e);
  }
  plan.changed = !plan.to_load.empty() || !plan.failed.empty() || plan.entries != before ||
                 plan.handles.size() != handles.size();
  return plan;
}

Status ModelLifecycle::ReloadModel(const std::string& name, bool retry_failed) {
  std::error_code ec;
  if (!fs::is_directory(fs::path(options_.model_repository) / name, ec)) {
    return NotFound("model '" + name + "' has no folder in --model-repository (models: " +
                    Current()->repository->NameList() + " are loaded)");
  }
  std::vector<EntryPtr> versions;
  std::string default_name;
  HandleMap old_handles;
  {  // no reference to the current state may outlive this block: it holds the handles
    auto current = Current();
    versions = current->repository->Versions(name);
    default_name = current->repository->default_name();
    for (const auto& [key, handle] : current->handles) {
      if (key.first == name) old_handles.emplace(key, handle);
    }
  }
  ReloadPlan plan = PlanReload(name, ScanModel(options_.model_repository, name), versions,
                               old_handles, retry_failed);
  if (!plan.changed) return Status::Ok();
  if (!plan.to_load.empty()) {  // show LOADING where no READY version of that number serves
    std::vector<EntryPtr> shown;
    for (const auto& e : versions) {
      const bool replaced =
          std::any_of(plan.to_load.begin(), plan.to_load.end(),
                      [&](const ModelEntry& l) { return l.version == e->version; });
      if (!replaced || e->state == ModelState::kReady) shown.push_back(e);
    }
    for (const auto& l : plan.to_load) {
      if (!old_handles.count({name, l.version})) shown.push_back(std::make_shared<ModelEntry>(l));
    }
    PublishModel(name, std::move(shown), old_handles);
  }
  for (auto& e : plan.to_load) {
    LoadAndWarm(&e);
    LogModel(e, name == default_name);
  }
  return FinishReload(name, std::move(plan.entries), std::move(plan.handles),
                      std::move(plan.to_load), std::move(plan.failed), std::move(old_handles));
}

Status ModelLifecycle::FinishReload(const std::string& name, std::vector<EntryPtr> entries,
                                    HandleMap handles, std::vector<ModelEntry> loaded,
                                    std::vector<ModelEntry> failed, HandleMap old_handles) {
  Status result;
  for (auto& e : failed) {
    LogModel(e, false);
    metrics_->RecordModelLoad(name, false, 0);
    loaded.push_back(std::move(e));
  }
  for (auto& e : loaded) {
    const auto key = std::make_pair(name, e.version);
    if (e.state == ModelState::kReady) {
      handles[key] = make_handle_(std::move(e));
      entries.push_back(handles[key]->entry);
      continue;
    }
    if (result.ok()) {
      result = FailedPrecondition("model '" + name + "' version " + e.version +
                                  " failed to load: " + e.error);
    }
    auto old = old_handles.find(key);
    if (old == old_handles.end()) {
      entries.push_back(std::make_shared<const ModelEntry>(std::move(e)));
      continue;
    }
    handles[key] = old->second;  // the version loaded before keeps serving
    ModelEntry kept = *old->second->entry;
    kept.error = "reload failed, the files loaded before still serve: " + e.error;
    kept.fingerprint = e.fingerprint;  // not retried by polling until the files change again
    entries.push_back(std::make_shared<const ModelEntry>(std::move(kept)));
  }
  KeepOldWhileFailing(Current()->repository->Versions(name), old_handles, &entries, &handles);
  std::vector<std::shared_ptr<ModelHandle>> retired;
  for (const auto& [key, handle] : old_handles) {
    auto now = handles.find(key);
    if (now == handles.end() || now->second != handle) retired.push_back(handle);
  }
  old_handles.clear();  // RetireAndDrain waits until only it holds the retired handles
  RetireAndDrain(name, std::move(entries), std::move(handles), std::move(retired));
  return result;
}

}  // namespace mha::serve
