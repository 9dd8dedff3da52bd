// ModelLifecycle: the published state, the start-up load with warmup, Stop
// (model_lifecycle.h). Later loads, unloads and polls: lifecycle_ops.cc; reloads: reload.cc.
#include "server/serving/lifecycle/model_lifecycle.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <map>
#include <utility>

#include "server/serving/llama/llama_entry.h"
#include "server/serving/repository/default_model.h"

namespace mha::serve {
namespace {

// The warmup of a version whose config.json has no "warmup" key (the built-in model's too): a
// small pass and a pass with weights, so that the first request does not pay for BLAS's thread
// start, ATen's first allocations and lazy initialisation (issue 26: 11.9 ms vs ~0.5 ms warm).
const std::vector<WarmupShape>& DefaultWarmup() {
  static const std::vector<WarmupShape> shapes = {{1, 16, false}, {2, 8, true}};
  return shapes;
}

// [batch, seq, dim] float32 values evenly spaced over [-1, 1] (torch.linspace's).
HostTensor Ramp(int64_t batch, int64_t seq, int64_t dim) {
  const int64_t n = batch * seq * dim;
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    values[static_cast<size_t>(i)] =
        n > 1 ? static_cast<float>(-1.0 + 2.0 * static_cast<double>(i) / (n - 1)) : -1.0f;
  }
  return HostTensor::FromFloats({batch, seq, dim}, std::move(values));
}

// Warmup passes on a freshly loaded version, before it is READY. config.json's "warmup" passes
// are self-attention and a failed one makes the version FAILED. Without the key the default
// passes run, with key and value of the model's kdim/vdim; one that fails is logged and the
// version stays READY (it was loadable; the first request will say what is wrong).
void Warmup(ModelEntry* entry) {
  if (entry->llama) return WarmupLlama(entry);
  if (entry->state != ModelState::kReady) return;
  const bool given = entry->config.warmup_given;
  const std::vector<WarmupShape>& shapes = given ? entry->config.warmup : DefaultWarmup();
  if (shapes.empty()) return;
  const Clock::time_point start = Clock::now();
  const MhaOptions& options = entry->info.options;
  const int64_t embed = options.embed_dim;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const WarmupShape& shape = shapes[i];
    HostInputs in;
    in.query = Ramp(shape.batch, shape.seq, embed);
    if (!given && (options.key_dim() != embed || options.value_dim() != embed)) {
      in.key = Ramp(shape.batch, shape.seq, options.key_dim());
      in.value = Ramp(shape.batch, shape.seq, options.value_dim());
    }
    in.need_weights = shape.need_weights;
    const Status status =
        Forward(*entry->model, in, OutputTypes{ToElementType(options.dtype), std::nullopt})
            .status();
    const std::string what = "warmup[" + std::to_string(i) + "] (batch " +
                             std::to_string(shape.batch) + ", seq " + std::to_string(shape.seq) +
                             ") failed: " + status.ToString();
    if (!status.ok() && !given) {
      spdlog::warn("model {} v{} default {}", entry->name, entry->version, what);
      return;
    }
    if (!status.ok()) {
      entry->state = ModelState::kFailed;
      entry->error = what;
      entry->model.reset();
      return;
    }
    entry->warmup_passes = static_cast<int64_t>(i) + 1;
  }
  spdlog::info("model {} v{} warmup: {} passes in {:.1f} ms{}", entry->name, entry->version,
               shapes.size(), MicrosBetween(start, Clock::now()) / 1000.0,
               given ? "" : " (default)");
}

}  // namespace

void LogModel(const ModelEntry& e, bool is_default) {
  if (e.llama) return LogLlamaModel(e, is_default);
  if (e.state != ModelState::kReady) {
    spdlog::error("model {} v{} {}: {} (source {})", e.name, e.version, ModelStateName(e.state),
                  e.error, e.source);
    return;
  }
  const MhaOptions& o = e.info.options;
  spdlog::info(
      "model {}{} v{} READY: embed_dim={} num_heads={} head_dim={} kdim={} vdim={} bias={} "
      "add_bias_kv={} add_zero_attn={} dtype={} compute_dtype={} device={} format={} layout={} "
      "parameters={} source={}",
      e.name, is_default ? " (default)" : "", e.version, o.embed_dim, o.num_heads, o.head_dim(),
      o.key_dim(), o.value_dim(), o.bias, o.add_bias_kv, o.add_zero_attn, DTypeName(o.dtype),
      DTypeName(e.info.compute_dtype), e.info.device, e.format, e.layout, e.info.parameter_count,
      e.source);
  if (!e.unused_keys.empty()) {
    spdlog::warn("model {}: {} unused keys in {} (first: {})", e.name, e.unused_keys.size(),
                 e.source, e.unused_keys.front());
  }
  if (!e.config.unknown_keys.empty()) {
    std::string keys;
    for (const auto& k : e.config.unknown_keys) keys += (keys.empty() ? "" : ", ") + k;
    spdlog::warn("model {}: {} has unknown keys (ignored): {}", e.name, e.config.model.path, keys);
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
