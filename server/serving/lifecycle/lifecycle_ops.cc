// ModelLifecycle's operations after the start-up load: load / unload on the lifecycle thread,
// repository polling, retiring replaced handles, the repository index (model_lifecycle.h).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "server/serving/lifecycle/model_lifecycle.h"

namespace fs = std::filesystem;

namespace mha::serve {
namespace {

using EntryPtr = ModelRepository::EntryPtr;

Status CheckModelName(const std::string& name) {
  if (name.empty() || name.size() > 255 || name[0] == '.' ||
      name.find_first_of("/\\") != std::string::npos) {
    return InvalidArgument("name: must be a model folder name of the repository, got '" +
                           name.substr(0, 128) + "'");
  }
  return Status::Ok();
}

}  // namespace

const char* ModelControlModeName(ModelControlMode mode) {
  switch (mode) {
    case ModelControlMode::kNone:
      return "none";
    case ModelControlMode::kPoll:
      return "poll";
    case ModelControlMode::kExplicit:
      return "explicit";
  }
  return "unknown";
}

StatusOr<ModelControlMode> ParseModelControlMode(const std::string& text) {
  if (text == "none") return ModelControlMode::kNone;
  if (text == "poll") return ModelControlMode::kPoll;
  if (text == "explicit") return ModelControlMode::kExplicit;
  return InvalidArgument("--model-control-mode must be none, poll or explicit, got '" + text + "'");
}

Status ModelLifecycle::ControlAllowed(bool loads) const {
  switch (options_.model_control) {
    case ModelControlMode::kNone:
      return FailedPrecondition(
          "model control is off (--model-control-mode none): start mha-server with "
          "--model-control-mode explicit to load and unload models through this API, or poll to "
          "follow the repository folder");
    case ModelControlMode::kPoll:
      if (!loads) return Status::Ok();
      return FailedPrecondition(
          "--model-control-mode poll: the repository folder drives loading (rescanned every "
          "--repository-poll-secs); LoadModel and UnloadModel need --model-control-mode explicit");
    case ModelControlMode::kExplicit:
      return Status::Ok();
  }
  return Internal("unknown model control mode");
}

void ModelLifecycle::Enqueue(std::function<void()> op, const Callback& refused) {
  {
    std::lock_guard<std::mutex> lock(ops_mu_);
    if (!stopping_) {
      ops_.push_back(std::move(op));
      ops_cv_.notify_all();
      return;
    }
  }
  refused(Unavailable("server is shutting down"));
}

void ModelLifecycle::LoadModel(const std::string& name, Callback done) {
  Status allowed = ControlAllowed(true);
  if (allowed.ok()) allowed = CheckModelName(name);
  if (!allowed.ok()) return done(allowed);
  Enqueue(
      [this, name, done] {
        done(stopping_ ? Unavailable("server is shutting down") : ReloadModel(name, true));
      },
      done);
}

void ModelLifecycle::UnloadModel(const std::string& name, Callback done) {
  Status allowed = ControlAllowed(true);
  if (allowed.ok()) allowed = CheckModelName(name);
  if (!allowed.ok()) return done(allowed);
  Enqueue([this, name,
           done] { done(stopping_ ? Unavailable("server is shutting down") : Unload(name)); },
          done);
}

void ModelLifecycle::LifecycleLoop() {
  Clock::time_point next_poll = Clock::now() + options_.poll_interval;
  std::unique_lock<std::mutex> lock(ops_mu_);
  auto wake = [this] { return stopping_ || !ops_.empty(); };
  while (!stopping_) {
    if (!ops_.empty()) {
      std::function<void()> op = std::move(ops_.front());
      ops_.pop_front();
      lock.unlock();
      op();
      lock.lock();
    } else if (options_.model_control != ModelControlMode::kPoll) {
      ops_cv_.wait(lock, wake);
    } else if (!ops_cv_.wait_until(lock, next_poll, wake)) {
      lock.unlock();
      PollRepository();
      lock.lock();
      next_poll = Clock::now() + options_.poll_interval;
    }
  }
}

void ModelLifecycle::PollRepository() {
  auto folders = ListModelFolders(options_.model_repository);
  if (!folders.ok()) {  // keep serving what is loaded; the folder may be back next time
    spdlog::error("repository poll: {}", folders.status().ToString());
    return;
  }
  std::set<std::string> names(folders->begin(), folders->end());
  std::set<std::string> loaded;
  for (const auto& e : Current()->repository->entries()) loaded.insert(e->name);
  names.insert(loaded.begin(), loaded.end());
  for (const auto& name : names) {
    if (stopping_) return;
    const bool present = std::binary_search(folders->begin(), folders->end(), name);
    const Status status = present ? ReloadModel(name, false) : Unload(name);
    if (!present && status.ok()) spdlog::info("repository poll: {} removed, unloaded", name);
  }
}

void ModelLifecycle::PublishModel(const std::string& name, std::vector<EntryPtr> entries,
                                  HandleMap handles) {
  auto current = Current();
  auto state = std::make_shared<ServingState>();
  for (const auto& e : current->repository->entries()) {
    if (e->name != name) entries.push_back(e);
  }
  state->handles = std::move(handles);
  for (const auto& [key, handle] : current->handles) {
    if (key.first != name) state->handles.emplace(key, handle);
  }
  state->repository = std::make_shared<const ModelRepository>(std::move(entries),
                                                              current->repository->default_name());
  Publish(std::move(state));
}

void ModelLifecycle::RetireAndDrain(const std::string& name, std::vector<EntryPtr> entries,
                                    HandleMap handles,
                                    std::vector<std::shared_ptr<ModelHandle>> retired) {
  bool ready = false;
  for (const auto& h : retired) metrics_->SetVersionReady(name, h->entry->version, false);
  for (const auto& e : entries) {
    ready = ready || e->state == ModelState::kReady;
    metrics_->SetVersionReady(name, e->version, e->state == ModelState::kReady);
  }
  metrics_->SetModelLoaded(name, ready);
  if (retired.empty()) return PublishModel(name, std::move(entries), std::move(handles));
  std::vector<EntryPtr> shown = entries;
  for (const auto& handle : retired) {
    ModelEntry unloading = *handle->entry;
    unloading.state = ModelState::kUnloading;
    shown.push_back(std::make_shared<const ModelEntry>(std::move(unloading)));
    retired_.push_back(handle);
  }
  retired.clear();
  PublishModel(name, std::move(shown), handles);
  // Requests hold their handle until answered: when only retired_ holds it, it is drained. (The
  // caller holds no State and no handle map by now; Infer holds a State only while it submits.)
  auto busy = [this] {
    return std::any_of(retired_.begin(), retired_.end(),
                       [](const auto& h) { return h.use_count() > 1; });
  };
  while (busy() && !stopping_) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  if (stopping_) return;  // Stop() shuts the retired schedulers down (completing their tasks)
  for (const auto& handle : retired_) {
    spdlog::info("model {} v{} unloaded (its requests were answered)", handle->entry->name,
                 handle->entry->version);
    metrics_->RecordModelUnload(handle->entry->name);
  }
  retired_.clear();  // ~ModelHandle: the idle schedulers stop, on this thread
  PublishModel(name, std::move(entries), std::move(handles));
}

Status ModelLifecycle::Unload(const std::string& name) {
  std::vector<std::shared_ptr<ModelHandle>> retired;
  {  // no reference to the current state may outlive this block: it holds the handles
    auto current = Current();
    if (current->repository->Versions(name).empty()) {
      return NotFound("model '" + name +
                      "' is not loaded (loaded: " + current->repository->NameList() + ")");
    }
    for (const auto& [key, handle] : current->handles) {
      if (key.first == name) retired.push_back(handle);
    }
  }
  RetireAndDrain(name, {}, {}, std::move(retired));
  metrics_->RemoveModelLoaded(name);
  return Status::Ok();
}

StatusOr<std::vector<IndexEntry>> ModelLifecycle::RepositoryIndex() const {
  MHA_RETURN_IF_ERROR(ControlAllowed(false));
  auto folders = ListModelFolders(options_.model_repository);
  if (!folders.ok()) return folders.status();
  auto repository = Current()->repository;
  std::set<std::string> names(folders->begin(), folders->end());
  for (const auto& e : repository->entries()) names.insert(e->name);
  std::vector<IndexEntry> index;
  for (const auto& name : names) {
    const auto versions = repository->Versions(name);
    if (versions.empty()) index.push_back({name, "", std::nullopt, "not loaded"});
    for (const auto& e : versions) index.push_back({name, e->version, e->state, e->error});
  }
  return index;
}

}  // namespace mha::serve
