#include "server/serving/llama/llama_entry.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "mha/llama_config.h"
#include "mha/model_config.h"
#include "server/serving/clock.h"

namespace mha::serve {
namespace {

// [batch, seq, dim] float32 values evenly spaced over [-1, 1].
HostTensor Ramp(int64_t batch, int64_t seq, int64_t dim) {
  const int64_t n = batch * seq * dim;
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    values[static_cast<size_t>(i)] =
        n > 1 ? static_cast<float>(-1.0 + 2.0 * static_cast<double>(i) / (n - 1)) : -1.0f;
  }
  return HostTensor::FromFloats({batch, seq, dim}, std::move(values));
}

}  // namespace

bool IsLlamaFolder(const ServingConfig& config) {
  return config.model.json != nullptr && IsLlamaConfig(*config.model.json);
}

StatusOr<std::vector<std::string>> LlamaFolderFiles(const std::string& dir) {
  return LlamaCheckpointFiles(dir);
}

LlamaLoadOptions LlamaLoadOptionsFor(const ModelEntry& entry, const LoadOverrides& overrides) {
  LlamaLoadOptions o;
  o.path = entry.path;
  // The version folder's own config.json (a checkpoint copied in whole), else the model's.
  o.config_path = ModelConfigPathIn(entry.path);
  if (o.config_path.empty()) o.config_path = entry.config.model.path;
  const ModelConfig& c = entry.config.model;
  o.dtype = overrides.dtype ? *overrides.dtype : c.dtype.value_or(DType::kFloat32);
  o.device = overrides.device ? *overrides.device : c.device.value_or("auto");
  return o;
}

void SetLlamaModel(LoadedLlamaModel loaded, ModelEntry* entry) {
  const LlamaModelInfo& l = loaded.info;
  entry->llama = std::move(loaded.stack);
  entry->llama_info = l;
  ModelInfo info;
  info.options.embed_dim = l.hidden_size;
  info.options.num_heads = l.num_heads;
  info.options.bias = l.attention_bias;
  info.options.dtype = l.dtype;
  info.options.device = l.device;
  info.device = l.device;
  info.compute_dtype = l.compute_dtype;
  info.parameter_count = l.parameter_count;
  entry->info = info;
  entry->format = "safetensors";
  entry->layout = "llama";
  entry->unused_keys.clear();
  entry->state = ModelState::kReady;
}

void WarmupLlama(ModelEntry* entry) {
  if (entry->state != ModelState::kReady || !entry->llama) return;
  const bool given = entry->config.warmup_given;
  const std::vector<WarmupShape> shapes =
      given ? entry->config.warmup : std::vector<WarmupShape>{WarmupShape{1, 16, false}};
  const Clock::time_point start = Clock::now();
  const LlamaModelInfo& l = entry->llama_info;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const WarmupShape& s = shapes[i];
    const Status status =
        LlamaForward(*entry->llama, 0, Ramp(s.batch, s.seq, l.hidden_size), ToElementType(l.dtype))
            .status();
    if (status.ok()) {
      entry->warmup_passes = static_cast<int64_t>(i) + 1;
      continue;
    }
    const std::string what = "warmup[" + std::to_string(i) + "] (batch " + std::to_string(s.batch) +
                             ", seq " + std::to_string(s.seq) +
                             ", layer 0) failed: " + status.ToString();
    if (!given) {
      spdlog::warn("model {} v{} default {}", entry->name, entry->version, what);
      return;
    }
    entry->state = ModelState::kFailed;
    entry->error = what;
    entry->llama.reset();
    return;
  }
  spdlog::info("model {} v{} warmup: {} passes of layer 0 in {:.1f} ms{}", entry->name,
               entry->version, shapes.size(), MicrosBetween(start, Clock::now()) / 1000.0,
               given ? "" : " (default)");
}

void LogLlamaModel(const ModelEntry& e, bool is_default) {
  const LlamaModelInfo& l = e.llama_info;
  spdlog::info(
      "model {}{} v{} READY: llama stack layers={} hidden_size={} heads={} kv_heads={} "
      "head_dim={} max_positions={} rope_theta={} attention_bias={} dtype={} compute_dtype={} "
      "device={} parameters={} kv_bytes_per_token_per_layer={} source={}",
      e.name, is_default ? " (default)" : "", e.version, l.num_layers, l.hidden_size, l.num_heads,
      l.num_kv_heads, l.head_dim, l.max_positions, l.rope_theta, l.attention_bias,
      DTypeName(l.dtype), DTypeName(l.compute_dtype), l.device, l.parameter_count,
      l.kv_bytes_per_token, e.source);
}

}  // namespace mha::serve
