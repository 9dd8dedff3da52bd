// ModelLifecycle: the published state, the start-up load with warmup, Stop
// (model_lifecycle.h). Later loads, unloads and polls: lifecycle_ops.cc; reloads: reload.cc.
#include "server/serving/lifecycle/model_lifecycle.h"

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <utility>

#include "server/serving/repository/default_model.h"

namespace mha::serve {
namespace {

// Warmup passes on a freshly loaded version (config.json "warmup"): FAILED when one fails.
void Warmup(ModelEntry* entry) {
  if (entry->state != ModelState::kReady || entry->config.warmup.empty()) return;
  const Clock::time_point start = Clock::now();
  const int64_t embed = entry->model->options().embed_dim;
  for (size_t i = 0; i < entry->config.warmup.size(); ++i) {
    const WarmupShape& shape = entry->config.warmup[i];
    ForwardInputs in;
    in.query = at::linspace(-1, 1, shape.batch * shape.seq * embed)
                   .reshape({shape.batch, shape.seq, embed});
    in.need_weights = shape.need_weights;
    ForwardOutputs out;
    Status status = entry->model->Forward(in, &out);
    if (!status.ok()) {
      entry->state = ModelState::kFailed;
      entry->error = "warmup[" + std::to_string(i) + "] (batch " + std::to_string(shape.batch) +
                     ", seq " + std::to_string(shape.seq) + ") failed: " + status.ToString();
      entry->model.reset();
      return;
    }
  }
  spdlog::info("model {} v{} warmup: {} passes in {:.1f} ms", entry->name, entry->version,
               entry->config.warmup.size(), MicrosBetween(start, Clock::now()) / 1000.0);
}

}  // namespace

void LogModel(const ModelEntry& e, bool is_default) {
  if (e.state != ModelState::kReady) {
    spdlog::error("model {} v{} {}: {} (source {})", e.name, e.version, ModelStateName(e.state),
                  e.error, e.source);
    return;
  }
  const MhaOptions& o = e.model->options();
  spdlog::info(
      "model {}{} v{} READY: embed_dim={} num_heads={} head_dim={} kdim={} vdim={} bias={} "
      "add_bias_kv={} add_zero_attn={} dtype={} compute_dtype={} device={} format={} layout={} "
      "parameters={} source={}",
      e.name, is_default ? " (default)" : "", e.version, o.embed_dim, o.num_heads, o.head_dim(),
      o.key_dim(), o.value_dim(), o.bias, o.add_bias_kv, o.add_zero_attn, DTypeName(o.dtype),
      DTypeName(e.model->compute_dtype()), e.model->device(), e.format, e.layout,
      e.model->parameter_count(), e.source);
  if (!e.unused_keys.empty()) {
    spdlog::warn("model {}: {} unused keys in {} (first: {})", e.name, e.unused_keys.size(),
                 e.source, e.unused_keys.front());
  }
  if (!e.config.unknown_keys.empty()) {
    std::string keys;
    for (const auto& k : e.config.unknown_keys) keys += (keys.empty() ? "" : ", ") + k;
    spdlog::warn("model {}: {} has unknown keys (ignored): {}", e.name, e.config.path, keys);
  }
}

ModelHandle::~ModelHandle() {
  if (scheduler) scheduler->Shutdown();
}

ModelLifecycle::ModelLifecycle(const ServerCoreOptions& options, Metrics* metrics,
                               HandleFactory make_handle,
                               std::shared_ptr<const ModelRepository> initial)
    : options_(options), metrics_(metrics), make_handle_(std::move(make_handle)) {
  auto state = std::make_shared<ServingState>();
  state->repository = std::move(initial);
  Publish(std::move(state));
}

ModelLifecycle::~ModelLifecycle() { Stop(); }

std::shared_ptr<const ServingState> ModelLifecycle::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

void ModelLifecycle::Publish(std::shared_ptr<const ServingState> state) {
  std::lock_guard<std::mutex> lock(mu_);
  state_ = std::move(state);
}

void ModelLifecycle::StartLoading(std::function<void()> on_done) {
  std::vector<ModelEntry> entries;
  for (const auto& e : Current()->repository->entries()) entries.push_back(*e);
  loader_ =
      std::thread([this, entries = std::move(entries), on_done = std::move(on_done)]() mutable {
        LoadAll(std::move(entries), std::move(on_done));
        LifecycleLoop();
      });
}

void ModelLifecycle::LoadAll(std::vector<ModelEntry> entries, std::function<void()> on_done) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < entries.size() && !stopping_; i = next++) {
      ModelEntry& entry = entries[i];
      if (entry.state != ModelState::kLoading) continue;
      if (entry.source == "builtin") {
        entry = MakeDefaultModel(options_.overrides);
      } else {
        LoadAndWarm(&entry);
      }
    }
  };
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const size_t threads = std::min<size_t>(
      entries.size(), options_.load_threads > 0 ? options_.load_threads : std::min(cores, 4u));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& thread : pool) thread.join();

  auto state = std::make_shared<ServingState>();
  const std::string default_name = Current()->repository->default_name();
  std::map<std::string, bool> ready;
  for (auto& entry : entries) {
    LogModel(entry, entry.name == default_name);
    if (entry.state != ModelState::kLoading) {
      ready[entry.name] = ready[entry.name] || entry.state == ModelState::kReady;
      metrics_->SetVersionReady(entry.name, entry.version, entry.state == ModelState::kReady);
    }
    if (entry.state == ModelState::kReady && !stopping_) {
      state->handles[{entry.name, entry.version}] = make_handle_(entry);
    }
  }
  for (const auto& [name, any_ready] : ready) metrics_->SetModelLoaded(name, any_ready);
  state->repository = std::make_shared<const ModelRepository>(std::move(entries), default_name);
  Publish(std::move(state));
  if (on_done) on_done();
}

void ModelLifecycle::LoadAndWarm(ModelEntry* entry) {
  const Clock::time_point start = Clock::now();
  LoadModelEntry(options_.overrides, entry);
  Warmup(entry);
  const double seconds = MicrosBetween(start, Clock::now()) * 1e-6;
  metrics_->RecordModelLoad(entry->name, entry->state == ModelState::kReady, seconds);
}

void ModelLifecycle::Stop() {
  std::deque<std::function<void()>> pending;
  {
    std::lock_guard<std::mutex> lock(ops_mu_);
    stopping_ = true;
    pending.swap(ops_);
  }
  ops_cv_.notify_all();
  for (auto& op : pending) op();  // each answers UNAVAILABLE: stopping_ is set
  if (loader_.joinable() && loader_.get_id() != std::this_thread::get_id()) loader_.join();
  auto state = Current();
  if (!state) return;
  for (const auto& [key, handle] : state->handles) handle->scheduler->Shutdown();
  for (const auto& handle : retired_) handle->scheduler->Shutdown();
}

}  // namespace mha::serve
