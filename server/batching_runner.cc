#include "batching_runner.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

namespace mha::serve {
namespace {

// config.json key -> (minimum, field).
Status ReadInt(const nlohmann::json& json, const std::string& path, const char* key,
               int64_t minimum, int64_t* field) {
  auto it = json.find(key);
  if (it == json.end()) return Status::Ok();
  if (!it->is_number_integer() || it->get<int64_t>() < minimum) {
    return InvalidArgument(path + ": '" + key + "' must be an integer >= " +
                           std::to_string(minimum) + ", got " + it->dump());
  }
  *field = it->get<int64_t>();
  return Status::Ok();
}

}  // namespace

StatusOr<BatcherOptions> ReadBatcherConfig(const std::string& config_json_path,
                                           const BatcherOptions& defaults) {
  std::error_code ec;
  if (config_json_path.empty() || !std::filesystem::is_regular_file(config_json_path, ec)) {
    return defaults;
  }
  std::ifstream in(config_json_path);
  if (!in) return NotFound(config_json_path + ": cannot open");
  const nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return InvalidArgument(config_json_path + ": config is not a JSON object");
  }
  BatcherOptions o = defaults;
  int64_t queue_size = static_cast<int64_t>(o.max_queue_size);
  int64_t instances = o.instances;
  MHA_RETURN_IF_ERROR(ReadInt(json, config_json_path, "max_batch_size", 1, &o.max_batch_rows));
  MHA_RETURN_IF_ERROR(ReadInt(json, config_json_path, "max_batch_tokens", 1, &o.max_batch_tokens));
  MHA_RETURN_IF_ERROR(
      ReadInt(json, config_json_path, "max_queue_delay_us", 0, &o.max_queue_delay_us));
  MHA_RETURN_IF_ERROR(ReadInt(json, config_json_path, "max_queue_size", 1, &queue_size));
  MHA_RETURN_IF_ERROR(ReadInt(json, config_json_path, "instances", 1, &instances));
  if (instances > 256) {
    return InvalidArgument(config_json_path + ": 'instances' must be <= 256, got " +
                           std::to_string(instances));
  }
  o.max_queue_size = static_cast<size_t>(queue_size);
  o.instances = static_cast<int>(instances);
  return o;
}

BatchingRunner::BatchingRunner(BatcherOptions defaults, Metrics* metrics)
    : defaults_(defaults), metrics_(metrics) {}

BatchingRunner::~BatchingRunner() { Shutdown(); }

void BatchingRunner::AddModel(const std::string& name, std::shared_ptr<const MhaModel> model,
                              const BatcherOptions& options) {
  if (!model) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_ || batchers_.count(model.get())) return;
  const MhaModel* key = model.get();
  batchers_.emplace(key, DynamicBatcher::ForModel(std::move(model), name, options, metrics_));
}

void BatchingRunner::Submit(InferenceTask task, DoneCallback done) {
  DynamicBatcher* batcher = nullptr;
  Status refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      refused = Unavailable("server is shutting down");
    } else if (!task.model) {
      refused = Internal("task without a model");
    } else {
      auto it = batchers_.find(task.model.get());
      if (it == batchers_.end()) {
        it = batchers_
                 .emplace(task.model.get(), DynamicBatcher::ForModel(task.model, task.model_name,
                                                                     defaults_, metrics_))
                 .first;
      }
      batcher = it->second.get();
    }
  }
  if (!batcher) {
    task = InferenceTask();  // inputs may borrow the request: drop them before answering
    InferenceResult result;
    result.status = std::move(refused);
    done(std::move(result));
    return;
  }
  batcher->Submit(std::move(task), std::move(done));
}

void BatchingRunner::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  // No batcher is added once stopping_ is set; each one drains its accepted tasks.
  for (auto& [model, batcher] : batchers_) batcher->Shutdown();
}

size_t BatchingRunner::queue_depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t depth = 0;
  for (const auto& [model, batcher] : batchers_) depth += batcher->queue_depth();
  return depth;
}

}  // namespace mha::serve
