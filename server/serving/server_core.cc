#include "server/serving/server_core.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "server/serving/repository/default_model.h"
#include "server/serving/server_core_internal.h"
#include "server/serving/sessions/kv_tier.h"

namespace mha::serve {
namespace {

constexpr char kUnknownModel[] = "unknown";  // the metrics label of names the server does not know

}  // namespace

using internal::Complete;

ServerCore::ServerCore(const ServerCoreOptions& options)
    : options_(options), metrics_(CurrentBuildInfo()) {}

ServerCore::~ServerCore() { Stop(); }

void ServerCore::StartLoading(std::function<void()> on_done) {
  lifecycle_->StartLoading(std::move(on_done));
}

std::shared_ptr<const ModelRepository> ServerCore::repository() const {
  return Current()->repository;
}

// Explicit mode with --load-model: only the named models (each must have a folder).
static Status KeepStartupModels(const std::vector<std::string>& wanted,
                                std::vector<ModelEntry>* entries) {
  if (wanted.empty()) return Status::Ok();
  std::vector<ModelEntry> kept;
  for (const auto& name : wanted) {
    bool found = false;
    for (const auto& e : *entries) {
      if (e.name == name) {
        kept.push_back(e);
        found = true;
      }
    }
    if (!found) {
      ModelRepository all(*entries, "");
      return NotFound("--load-model '" + name +
                      "' is not in the repository (models: " + all.NameList() + ")");
    }
  }
  *entries = std::move(kept);
  return Status::Ok();
}

StatusOr<std::unique_ptr<ServerCore>> ServerCore::Create(const ServerCoreOptions& options) {
  std::vector<ModelEntry> entries;
  std::string default_name;
  if (options.model_repository.empty()) {
    if (options.model_control != ModelControlMode::kNone) {
      return InvalidArgument("--model-control-mode " +
                             std::string(ModelControlModeName(options.model_control)) +
                             " needs --model-repository");
    }
    ModelEntry builtin;
    builtin.name = kDefaultModelName;
    builtin.source = builtin.format = "builtin";
    entries.push_back(std::move(builtin));
    default_name = kDefaultModelName;
  } else {
    auto scanned = ScanRepository(options.model_repository);
    if (!scanned.ok()) return scanned.status();
    entries = std::move(scanned.value());
    if (options.model_control == ModelControlMode::kExplicit) {
      MHA_RETURN_IF_ERROR(KeepStartupModels(options.startup_models, &entries));
    }
    auto picked = PickDefaultModel(entries, options.default_model);
    if (!picked.ok()) return picked.status();
    default_name = *picked;
  }
  // The shared KV tier (--kv-store): made once, shared by every version's session store.
  ServerCoreOptions with_tier = options;
  KvTierOptions kv = options.kv_store;
  kv.ttl_s = options.sessions.idle_timeout_s;
  auto tier = KvTier::Create(kv);
  if (!tier.ok()) return tier.status();
  with_tier.sessions.kv_tier = *tier;
  std::unique_ptr<ServerCore> core(new ServerCore(with_tier));
  if (*tier) core->metrics_.AddCollector([t = tier->get()] { return t->Collect(); });
  ServerCore* self = core.get();
  core->lifecycle_ = std::make_unique<ModelLifecycle>(
      core->options_, &core->metrics_,
      [self](ModelEntry entry) { return self->MakeHandle(std::move(entry)); },
      std::make_shared<const ModelRepository>(entries, default_name));
  return core;
}

StatusOr<std::vector<VersionStatistics>> ServerCore::Statistics(const std::string& name,
                                                                const std::string& version) {
  auto repository = Current()->repository;
  std::vector<ModelRepository::EntryPtr> entries =
      name.empty() ? repository->entries() : repository->Versions(name);
  entries.erase(std::remove_if(entries.begin(), entries.end(),
                               [&](const auto& e) {
                                 return (!version.empty() && e->version != version) ||
                                        (name.empty() && e->state != ModelState::kReady);
                               }),
                entries.end());
  if (!name.empty() && entries.empty()) return repository->Resolve(name, version).status();
  std::vector<VersionStatistics> out;
  for (const auto& e : entries) {
    if (!out.empty() && out.back().name == e->name && out.back().version == e->version) continue;
    VersionStatistics v{e->name, e->version, StatsSnapshot()};
    if (const StatsAggregator* a = metrics_.StatsFor(e->name, e->version)) v.stats = a->Read();
    out.push_back(std::move(v));
  }
  return out;
}

std::optional<SchedulerView> ServerCore::Scheduling(const std::string& name,
                                                    const std::string& version) const {
  auto state = Current();
  auto entry = state->repository->Resolve(name, version);
  if (!entry.ok()) return std::nullopt;
  auto it = state->handles.find({(*entry)->name, (*entry)->version});
  if (it == state->handles.end()) return std::nullopt;
  if (!it->second->served) return std::nullopt;
  return it->second->served->scheduling();
}

std::shared_ptr<ModelHandle> ServerCore::MakeHandle(ModelEntry entry) {
  auto handle = std::make_shared<ModelHandle>();
  handle->metrics = metrics_.ForVersion(entry.name, entry.version);
  handle->entry = std::make_shared<const ModelEntry>(std::move(entry));
  const ModelEntry& e = *handle->entry;
  if (e.state == ModelState::kReady && e.servable) {
    handle->served =
        e.servable->Serve(e, ServeContext{&options_, handle->metrics, session_directory_});
  }
  return handle;
}

StatsAggregator* ServerCore::MetricsFor(const ServingState* state, const std::string& requested) {
  if (state) {
    auto entry = state->repository->Find(requested);
    if (entry) return metrics_.ForModel(entry->name);
  }
  return metrics_.ForModel(kUnknownModel);  // unknown names must not make new series
}

void ServerCore::CountRequest(const std::optional<std::string>& model, const Status& status,
                              Clock::time_point start, Protocol protocol) {
  auto state = Current();
  internal::CountRequest(MetricsFor(model ? state.get() : nullptr, model.value_or("")),
                         status.code(), start, Clock::now(), protocol);
}

void ServerCore::Infer(InferenceRequest request, InferDone done) {
  if (!request.session_id.empty()) return InferStep(std::move(request), std::move(done));
  auto state = Current();
  auto refuse = [&](StatsAggregator* metrics, Status status, const std::string& model) {
    internal::Refuse(&request, done, metrics, std::move(status), model);
  };
  if (stopping_)
    return refuse(MetricsFor(state.get(), request.model), Unavailable("server is shutting down"),
                  "");
  auto entry = state->repository->Resolve(request.model, request.model_version);
  if (!entry.ok()) return refuse(MetricsFor(state.get(), request.model), entry.status(), "");
  auto it = state->handles.find({(*entry)->name, (*entry)->version});
  if (it == state->handles.end()) {
    return refuse(MetricsFor(state.get(), request.model),
                  Unavailable("model '" + (*entry)->name + "' version " + (*entry)->version +
                              " is not being served"),
                  "");
  }
  std::shared_ptr<ModelHandle> handle = it->second;
  if (Status valid = handle->served->ValidateForward(request); !valid.ok()) {
    handle->metrics->RecordInference(false, 0, 0, 0);
    return refuse(handle->metrics, std::move(valid), handle->entry->name);
  }
  ServedModel* served = handle->served.get();
  internal::Dispatch d = internal::MakeDispatch(std::move(handle), &request, std::move(done));
  served->Submit(std::move(d.task), std::move(d.finish));
}

void ServerCore::Stop() {
  stopping_ = true;
  if (lifecycle_) lifecycle_->Stop();
}

}  // namespace mha::serve
