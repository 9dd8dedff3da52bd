// The Llama-family kind: its folder (the checkpoint files), its load (all L layers as one stack),
// its warmup passes and log line; its serving side is llama_served.cc.
#include "server/serving/kinds/llama/llama_kind.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "mha/llama_config.h"
#include "mha/llama_engine.h"
#include "mha/model_config.h"
#include "server/serving/kinds/llama/llama_served.h"
#include "server/serving/kinds/warmup.h"
#include "server/serving/repository/model_repository.h"

namespace mha::serve {
namespace {

// What LoadLlamaModel gets for `entry` (entry.path is its folder): the nearest config.json (the
// version folder's, else the model folder's), dtype and device from the server's flags over
// config.json's "dtype"/"device" (float32, "auto" unless set).
LlamaLoadOptions LoadOptionsFor(const ModelEntry& entry, const LoadOverrides& overrides) {
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

// The one-layer view every protocol reads (embed_dim = E, num_heads = H, the dtypes, device,
// parameters) and the stack's own description.
void Describe(const LlamaModelInfo& l, ModelEntry* entry) {
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
  StackInfo& s = entry->stack;
  s.num_layers = l.num_layers;
  s.num_key_value_heads = l.num_kv_heads;
  s.head_dim = l.head_dim;
  s.max_positions = l.max_positions;
  s.rope_theta = l.rope_theta;
  s.kv_bytes_per_token_per_layer = l.kv_bytes_per_token;
}

class LlamaServable final : public Servable {
 public:
  LlamaServable(std::shared_ptr<const LlamaAttentionStack> stack, LlamaModelInfo info)
      : stack_(std::move(stack)), info_(std::move(info)) {}

  DefaultWarmupPasses DefaultWarmup(const BatcherOptions&) const override {
    return {{{1, 16, false}}, ""};
  }

  // A stateless forward of layer 0 (need_weights does not apply).
  Status WarmupPass(const WarmupShape& s, bool) const override {
    const Status status = LlamaForward(*stack_, 0, WarmupRamp(s.batch, s.seq, info_.hidden_size),
                                       ToElementType(info_.dtype))
                              .status();
    if (status.ok()) return status;
    return Status(status.code(), "layer 0: " + status.message());
  }

  void LogReady(const ModelEntry& e, bool is_default) const override {
    const LlamaModelInfo& l = info_;
    spdlog::info(
        "model {}{} v{} READY: llama stack layers={} hidden_size={} heads={} kv_heads={} "
        "head_dim={} max_positions={} rope_theta={} attention_bias={} dtype={} compute_dtype={} "
        "device={} parameters={} kv_cache_dtype={} kv_bytes_per_token_per_layer={} source={}",
        e.name, is_default ? " (default)" : "", e.version, l.num_layers, l.hidden_size, l.num_heads,
        l.num_kv_heads, l.head_dim, l.max_positions, l.rope_theta, l.attention_bias,
        DTypeName(l.dtype), DTypeName(l.compute_dtype), l.device, l.parameter_count,
        KvCacheDtypeName(e.kv_cache_dtype), e.kv_bytes_per_token, e.source);
  }

  std::unique_ptr<ServedModel> Serve(const ModelEntry& entry,
                                     const ServeContext& context) const override {
    return MakeLlamaServed(stack_, info_, entry, context);
  }

 private:
  const std::shared_ptr<const LlamaAttentionStack> stack_;
  const LlamaModelInfo info_;
};

class LlamaModelKind final : public ModelKind {
 public:
  const char* architecture() const override { return "llama"; }

  bool Claims(const ServingConfig& config) const override {
    return config.model.json != nullptr && IsLlamaConfig(*config.model.json);
  }

  Status Locate(const std::filesystem::path& dir, ModelEntry* entry,
                std::vector<std::string>* files) const override {
    auto found = LlamaCheckpointFiles(dir.string());  // the whole checkpoint folder
    if (!found.ok()) return found.status();
    entry->path = dir.string();
    files->insert(files->end(), found->begin(), found->end());
    return Status::Ok();
  }

  Status Load(const LoadOverrides& overrides, ModelEntry* entry) const override {
    auto loaded = LoadLlamaModel(LoadOptionsFor(*entry, overrides));
    if (!loaded.ok()) return loaded.status();
    Describe(loaded->info, entry);
    entry->format = "safetensors";
    entry->layout = "llama";
    entry->unused_keys.clear();
    entry->servable =
        std::make_shared<LlamaServable>(std::move(loaded->stack), std::move(loaded->info));
    return Status::Ok();
  }
};

}  // namespace

const ModelKind& LlamaKind() {
  static const LlamaModelKind kind;
  return kind;
}

}  // namespace mha::serve
