#include "server/serving/server_core.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "server/serving/budget.h"
#include "server/serving/llama/llama_handle.h"
#include "server/serving/llama/llama_requests.h"
#include "server/serving/repository/default_model.h"
#include "server/serving/server_core_internal.h"

namespace mha::serve {
namespace {

constexpr char kUnknownModel[] = "unknown";  // the metrics label of names the server does not know

Status CheckLimits(const HostInputs& in, const RequestLimits& limits) {
  const int64_t b = in.query.size(0);
  if (b > limits.max_batch_size) {
    return ResourceExhausted("query: batch size " + std::to_string(b) +
                             " exceeds --max-batch-size " + std::to_string(limits.max_batch_size));
  }
  auto check_length = [&](const char* field, int64_t length) {
    if (length <= limits.max_sequence_length) return Status::Ok();
    return ResourceExhausted(std::string(field) + ": sequence length " + std::to_string(length) +
                             " exceeds --max-sequence-length " +
                             std::to_string(limits.max_sequence_length));
  };
  MHA_RETURN_IF_ERROR(check_length("query", in.query.size(1)));
  if (in.key.defined()) {
    MHA_RETURN_IF_ERROR(check_length("key", in.key.size(1)));
    MHA_RETURN_IF_ERROR(check_length("value", in.value.size(1)));
  }
  return Status::Ok();
}

}  // namespace

using internal::Complete;

BatcherOptions BatcherOptionsFor(const ServingConfig& c, const BatcherOptions& defaults) {
  BatcherOptions o = defaults;
  if (c.max_batch_rows) o.max_batch_rows = *c.max_batch_rows;
  if (c.max_batch_tokens) o.max_batch_tokens = *c.max_batch_tokens;
  if (c.max_queue_delay_us) o.max_queue_delay_us = *c.max_queue_delay_us;
  if (c.max_queue_size) o.max_queue_size = static_cast<size_t>(*c.max_queue_size);
  if (c.instances) o.instances = static_cast<int>(*c.instances);
  return o;
}

BatcherOptions SchedulerOptionsFor(const ServingConfig& c, bool batching,
                                   const BatcherOptions& defaults) {
  BatcherOptions o = BatcherOptionsFor(c, defaults);
  o.batching = batching;  // off: one request per pass (the merging limits do not apply)
  return o;
}

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
  std::unique_ptr<ServerCore> core(new ServerCore(options));
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
  return it->second->scheduling;
}

std::shared_ptr<ModelHandle> ServerCore::MakeHandle(ModelEntry entry) {
  if (entry.llama) {
    StatsAggregator* metrics = metrics_.ForVersion(entry.name, entry.version);
    return MakeLlamaHandle(std::move(entry), options_, metrics, session_directory_);
  }
  auto handle = std::make_shared<ModelHandle>();
  handle->metrics = metrics_.ForVersion(entry.name, entry.version);
  BatcherOptions o = SchedulerOptionsFor(entry.config, options_.batching, options_.batcher);
  o.max_batch_work_bytes = options_.limits.max_work_bytes;
  if (o.batching) {
    spdlog::info("model {} scheduler: batching rows={} tokens={} delay_us={} queue={} instances={}",
                 entry.name, o.max_batch_rows, o.max_batch_tokens, o.max_queue_delay_us,
                 o.max_queue_size, o.instances);
  } else {
    spdlog::info("model {} scheduler: one request per pass, queue={} instances={}", entry.name,
                 o.max_queue_size, o.instances);
  }
  handle->scheduling = SchedulerView{o.batching,           o.instances,
                                     o.max_batch_rows,     o.max_batch_tokens,
                                     o.max_queue_delay_us, static_cast<int64_t>(o.max_queue_size)};
  handle->scheduler = DynamicBatcher::ForModel(entry.model, entry.name, o, handle->metrics);
  SessionOptions sessions = options_.sessions;
  sessions.max_work_bytes = options_.limits.max_work_bytes;
  sessions.max_response_bytes = options_.limits.max_response_bytes;
  handle->sessions = std::make_unique<SessionStore>(
      sessions, entry.model, SessionLocation{entry.name, entry.version}, session_directory_,
      handle->scheduler.get(), handle->metrics);
  handle->entry = std::make_shared<const ModelEntry>(std::move(entry));
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

Status ServerCore::Validate(const ModelHandle& handle, const InferenceRequest& request) const {
  const ModelEntry& entry = *handle.entry;
  if (entry.llama) return ValidateLlamaForward(entry, request, options_.limits);
  MHA_RETURN_IF_ERROR(CheckSingleLayer(entry, request));
  MHA_RETURN_IF_ERROR(ValidateInputs(*entry.model, request.inputs));
  MHA_RETURN_IF_ERROR(CheckLimits(request.inputs, options_.limits));
  const ModelInfo& model = entry.info;
  const PassCost cost =
      EstimatePassCost(model, request.output_dtype.value_or(model.options.dtype), request.inputs);
  return CheckPassCost(cost, request.inputs, options_.limits.max_response_bytes,
                       options_.limits.max_work_bytes);
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
  if (Status valid = Validate(*handle, request); !valid.ok()) {
    handle->metrics->RecordInference(false, 0, 0, 0);
    return refuse(handle->metrics, std::move(valid), handle->entry->name);
  }
  ModelRunner* scheduler = handle->scheduler.get();
  internal::Dispatch d = internal::MakeDispatch(std::move(handle), &request, std::move(done));
  scheduler->Submit(std::move(d.task), std::move(d.finish));
}

void ServerCore::Stop() {
  stopping_ = true;
  if (lifecycle_) lifecycle_->Stop();
}

}  // namespace mha::serve
