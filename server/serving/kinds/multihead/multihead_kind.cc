// The one-layer MHA kind: its version folder (one weights file), its load (mha::LoadModel), its
// warmup passes and log line; its serving side is mha_served.cc.
#include "server/serving/kinds/multihead/multihead_kind.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "mha/engine.h"
#include "server/serving/kinds/multihead/multihead_served.h"
#include "server/serving/kinds/multihead/warmup_plan.h"
#include "server/serving/kinds/warmup.h"
#include "server/serving/repository/model_repository.h"

namespace fs = std::filesystem;

namespace mha::serve {
namespace {

bool IsRegularFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);  // follows symlinks
}

std::string Join(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// Picks the weights file of one version folder, or explains why none can be picked.
StatusOr<std::string> PickWeightsFile(const fs::path& dir) {
  std::vector<std::string> model_files, other_files;
  std::error_code ec;
  for (const auto& item : fs::directory_iterator(dir, ec)) {
    const std::string name = item.path().filename().string();
    if (name.empty() || name[0] == '.' || !IsRegularFile(item.path())) continue;
    if (item.path().extension() == ".json") continue;
    (item.path().stem() == "model" ? model_files : other_files).push_back(name);
  }
  if (ec) return NotFound("cannot list " + dir.string() + ": " + ec.message());
  std::sort(model_files.begin(), model_files.end());
  std::sort(other_files.begin(), other_files.end());
  if (model_files.size() == 1) return (dir / model_files[0]).string();
  if (model_files.size() > 1) {
    return InvalidArgument(dir.string() + ": several weights files (" + Join(model_files) +
                           "); keep one model.* file");
  }
  if (other_files.size() == 1) return (dir / other_files[0]).string();
  if (other_files.empty()) {
    return NotFound(dir.string() + ": no weights file (expected model.safetensors, model.pt, ...)");
  }
  return InvalidArgument(dir.string() + ": cannot tell the weights file among " +
                         Join(other_files) + "; name it model.<ext>");
}

class MhaServable final : public Servable {
 public:
  MhaServable(std::shared_ptr<const MhaModel> model, ModelInfo info)
      : model_(std::move(model)), info_(std::move(info)) {}

  // On the CPU: a small pass and a pass with weights, so that the first request does not pay for
  // BLAS's thread start, ATen's first allocations and lazy initialisation (issue 26: 11.9 ms vs
  // ~0.5 ms). On a device: the merge's shapes and the graph buckets (warmup_plan.h), then the pass
  // with weights.
  DefaultWarmupPasses DefaultWarmup(const BatcherOptions& scheduler) const override {
    const WarmupShape weights{2, 8, true};
    if (info_.device.rfind("cuda", 0) != 0) return {{{1, 16, false}, weights}, ""};
    const GraphLimits graphs{info_.cuda_graph_max_tokens, info_.cuda_graph_max_graphs,
                             info_.cuda_graphs_shared};
    const DeviceWarmupOptions options;
    DeviceWarmupPlan plan = PlanDeviceWarmup(scheduler, graphs, options);
    plan.passes.push_back(weights);
    return {std::move(plan.passes),
            "device default: " + plan.Describe(options) + " + 1 with weights"};
  }

  // config.json's passes are self-attention; the default ones give key and value of the model's
  // kdim/vdim.
  Status WarmupPass(const WarmupShape& shape, bool given) const override {
    const MhaOptions& options = info_.options;
    const int64_t embed = options.embed_dim;
    HostInputs in;
    in.query = WarmupRamp(shape.batch, shape.seq, embed);
    if (!given && (options.key_dim() != embed || options.value_dim() != embed)) {
      in.key = WarmupRamp(shape.batch, shape.seq, options.key_dim());
      in.value = WarmupRamp(shape.batch, shape.seq, options.value_dim());
    }
    in.need_weights = shape.need_weights;
    return Forward(*model_, in, OutputTypes{ToElementType(options.dtype), std::nullopt}).status();
  }

  void LogReady(const ModelEntry& e, bool is_default) const override {
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
      spdlog::warn("model {}: {} has unknown keys (ignored): {}", e.name, e.config.model.path,
                   keys);
    }
  }

  std::unique_ptr<ServedModel> Serve(const ModelEntry& entry,
                                     const ServeContext& context) const override {
    return MakeMultiheadServed(model_, entry, context);
  }

 private:
  const std::shared_ptr<const MhaModel> model_;
  const ModelInfo info_;
};

class MhaModelKind final : public ModelKind {
 public:
  const char* architecture() const override { return "multihead_attention"; }
  bool Claims(const ServingConfig&) const override { return true; }

  Status Locate(const fs::path& dir, ModelEntry* entry,
                std::vector<std::string>* files) const override {
    auto weights = PickWeightsFile(dir);
    if (!weights.ok()) return weights.status();
    entry->path = *weights;
    files->push_back(*weights);
    return Status::Ok();
  }

  Status Load(const LoadOverrides& overrides, ModelEntry* entry) const override {
    LoadOptions options;
    options.path = entry->path;
    options.config = &entry->config.model;  // read once, at scan time
    options.dtype = overrides.dtype;
    options.device = overrides.device;
    options.cuda_graphs = overrides.cuda_graphs;
    auto loaded = LoadModel(options);
    if (!loaded.ok()) return loaded.status();
    entry->format = loaded->format;
    entry->layout = loaded->layout;
    entry->unused_keys = loaded->unused_keys;
    entry->info = loaded->info;
    entry->servable = std::make_shared<MhaServable>(std::move(loaded->model), loaded->info);
    return Status::Ok();
  }

  // E=512, H=8, bias, weights from a fixed seed (mha/engine.h BuildDefaultModel).
  Status LoadBuiltin(const LoadOverrides& overrides, ModelEntry* entry) const override {
    MhaOptions options;
    options.embed_dim = kDefaultEmbedDim;
    options.num_heads = kDefaultNumHeads;
    if (overrides.dtype) options.dtype = *overrides.dtype;
    if (overrides.device) options.device = *overrides.device;
    options.cuda_graphs = overrides.cuda_graphs;
    auto model = BuildDefaultModel(options);
    if (!model.ok()) return model.status();
    entry->format = model->format;
    entry->layout = model->layout;
    entry->info = model->info;
    entry->servable = std::make_shared<MhaServable>(std::move(model->model), model->info);
    return Status::Ok();
  }
};

}  // namespace

const ModelKind& MultiheadKind() {
  static const MhaModelKind kind;
  return kind;
}

}  // namespace mha::serve
