// LoadWeights: format detection, reading, prefix stripping, config.json, layout and options.
// Precedence for every option: the caller's LoadOptions > config.json > what the file carries
// (a TorchScript module's num_heads / add_zero_attn attributes) > defaults.
#include "mha/loader.h"

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>

#include "load/layouts.h"
#include "mha/model_config.h"

namespace mha {
namespace {

// config.json may also state the shapes; they must agree with what the tensors say.
Status CheckConfigShapes(const ModelConfig& config, const MhaOptions& options) {
  const std::pair<const char*, std::pair<std::optional<int64_t>, int64_t>> dims[] = {
      {"embed_dim", {config.embed_dim, options.embed_dim}},
      {"kdim", {config.kdim, options.key_dim()}},
      {"vdim", {config.vdim, options.value_dim()}}};
  for (const auto& [key, values] : dims) {
    if (values.first && *values.first != values.second) {
      return InvalidArgument(config.path + ": '" + key + "' is " + std::to_string(*values.first) +
                             " but the weights have " + std::to_string(values.second));
    }
  }
  const std::pair<const char*, std::pair<std::optional<bool>, bool>> flags[] = {
      {"bias", {config.bias, options.bias}},
      {"add_bias_kv", {config.add_bias_kv, options.add_bias_kv}}};
  for (const auto& [key, values] : flags) {
    if (values.first && *values.first != values.second) {
      return InvalidArgument(config.path + ": '" + key + "' is " +
                             (*values.first ? "true" : "false") + " but the weights say " +
                             (values.second ? "true" : "false"));
    }
  }
  return Status::Ok();
}

}  // namespace

namespace {

std::string SomeKeys(const TensorMap& tensors, size_t limit) {
  std::string out;
  size_t n = 0;
  for (const auto& entry : tensors) {
    if (n == limit) return out + ", ... (" + std::to_string(tensors.size()) + " keys)";
    out += (n++ ? ", '" : "'") + entry.first + "'";
  }
  return out;
}

StatusOr<TensorMap> StripPrefix(const std::string& path, std::string prefix, TensorMap tensors) {
  if (prefix.empty()) return tensors;
  if (prefix.back() != '.') prefix += '.';
  TensorMap stripped;
  for (auto& [key, tensor] : tensors) {
    if (key.size() > prefix.size() && key.compare(0, prefix.size(), prefix) == 0) {
      stripped.emplace(key.substr(prefix.size()), std::move(tensor));
    }
  }
  if (stripped.empty()) {
    return InvalidArgument(path + ": no key starts with prefix '" + prefix +
                           "'; keys found: " + SomeKeys(tensors, 5));
  }
  return stripped;
}

StatusOr<TensorMap> ReadTensors(const std::string& path, WeightsFormat format,
                                std::map<std::string, int64_t>* attributes) {
  switch (format) {
    case WeightsFormat::kSafetensors:
      return ReadSafetensors(path);
    case WeightsFormat::kTorchSave:
      return ReadTorchSave(path);
    case WeightsFormat::kTorchScript:
      return ReadTorchScript(path, attributes);
  }
  return Internal(path + ": unknown weights format");
}

StatusOr<LoadedWeights> LoadWeightsImpl(const LoadOptions& options) {
  const std::string& path = options.path;
  if (path.empty()) return InvalidArgument("weights path is empty");
  auto format = DetectWeightsFormat(path);
  if (!format.ok()) return format.status();

  ModelConfig config;
  if (options.config) {
    config = *options.config;
  } else {
    const std::string config_path =
        !options.config_path.empty()
            ? options.config_path
            : ModelConfigPathIn(std::filesystem::path(path).parent_path().string());
    if (!config_path.empty()) {
      auto read = ReadModelConfig(config_path);
      if (!read.ok()) return read.status();
      config = std::move(read.value());
    }
  }

  std::map<std::string, int64_t> attributes;
  auto tensors = ReadTensors(path, format.value(), &attributes);
  if (!tensors.ok()) return tensors.status();
  const std::string prefix = !options.prefix.empty() ? options.prefix : config.prefix.value_or("");
  auto stripped = StripPrefix(path, prefix, std::move(tensors.value()));
  if (!stripped.ok()) return stripped.status();
  auto layout = internal::ExtractLayout(path, stripped.value());
  if (!layout.ok()) return layout.status();

  LoadedWeights loaded;
  loaded.format = format.value();
  loaded.layout = layout->layout;
  loaded.weights = std::move(layout->weights);
  loaded.unused_keys = std::move(layout->unused_keys);
  MhaOptions& opts = loaded.options;
  opts.embed_dim = layout->embed_dim;
  opts.kdim = layout->kdim;
  opts.vdim = layout->vdim;
  opts.bias = layout->bias;
  opts.add_bias_kv = layout->add_bias_kv;
  MHA_RETURN_IF_ERROR(CheckConfigShapes(config, opts));

  auto attribute = [&](const char* name) -> std::optional<int64_t> {
    auto it = attributes.find(name);
    return it == attributes.end() ? std::nullopt : std::optional<int64_t>(it->second);
  };
  std::optional<int64_t> num_heads = options.num_heads  ? options.num_heads
                                     : config.num_heads ? config.num_heads
                                                        : attribute("num_heads");
  if (!num_heads) {
    return InvalidArgument(path +
                           ": num_heads unknown: set it in config.json beside the weights "
                           "or in the load options");
  }
  opts.num_heads = *num_heads;
  if (options.add_zero_attn) {
    opts.add_zero_attn = *options.add_zero_attn;
  } else if (config.add_zero_attn) {
    opts.add_zero_attn = *config.add_zero_attn;
  } else {
    opts.add_zero_attn = attribute("add_zero_attn").value_or(0) != 0;
  }
  // Without a dtype option, run in the dtype the weights are stored in (fp16/bf16), else fp32.
  const at::ScalarType stored = loaded.weights.q_weight.scalar_type();
  const DType stored_dtype = stored == at::kHalf       ? DType::kFloat16
                             : stored == at::kBFloat16 ? DType::kBFloat16
                                                       : DType::kFloat32;
  opts.dtype = options.dtype ? *options.dtype : config.dtype.value_or(stored_dtype);
  opts.device = options.device ? *options.device : config.device.value_or("auto");
  opts.cuda_graphs = options.cuda_graphs;

  Status valid = opts.Validate();
  if (!valid.ok()) return Status(valid.code(), path + ": " + valid.message());

  if (!loaded.unused_keys.empty()) {
    std::string keys;
    for (size_t i = 0; i < loaded.unused_keys.size() && i < 20; ++i) {
      keys += (i ? ", " : "") + loaded.unused_keys[i];
    }
    if (loaded.unused_keys.size() > 20) keys += ", ...";
    spdlog::info("{}: layout '{}' leaves {} key(s) unused: {}", path, loaded.layout,
                 loaded.unused_keys.size(), keys);
  }
  return loaded;
}

}  // namespace

StatusOr<LoadedWeights> LoadWeights(const LoadOptions& options) {
  try {
    return LoadWeightsImpl(options);
  } catch (const c10::Error& e) {
    return InvalidArgument(options.path + ": " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return InvalidArgument(options.path + ": " + e.what());
  }
}

}  // namespace mha
