// ModelLifecycle: the published state, the start-up load with warmup, Stop
// (model_lifecycle.h). Later loads, unloads and polls: lifecycle_ops.cc; reloads: reload.cc.
#include "server/serving/lifecycle/model_lifecycle.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <map>
#include <utility>

#include "server/serving/kinds/model_kind.h"
#include "server/serving/kinds/serve_options.h"
#include "server/serving/kinds/warmup.h"
#include "server/serving/repository/default_model.h"

namespace mha::serve {

void LogModel(const ModelEntry& e, bool is_default) {
  if (e.state == ModelState::kReady && e.servable) return e.servable->LogReady(e, is_default);
  spdlog::error("model {} v{} {}: {} (source {})", e.name, e.version, ModelStateName(e.state),
                e.error, e.source);
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
      LoadAndWarm(&entry);  // the built-in model too: it is warm before health says SERVING
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
  if (entry->source == "builtin") {
    *entry = MakeDefaultModel(options_.overrides);
  } else {
    LoadModelEntry(options_.overrides, entry);
  }
  WarmUp(entry, SchedulerOptionsFor(entry->config, options_.batching, options_.batcher));
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
  for (const auto& [key, handle] : state->handles) {
    if (handle->served) handle->served->Shutdown();
  }
  for (const auto& handle : retired_) {
    if (handle->served) handle->served->Shutdown();
  }
}

}  // namespace mha::serve
