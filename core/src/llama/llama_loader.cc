#include <ATen/ATen.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "load/json_text.h"
#include "mha/llama_engine.h"
#include "mha/llama_weights.h"
#include "mha/loader.h"
#include "mha/shape_string.h"

namespace mha {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kLayersPrefix = "model.layers.";
constexpr const char* kProjections[] = {"q_proj", "k_proj", "v_proj", "o_proj"};

// The layer index of "model.layers.{i}.self_attn.<...>", or -1 for any other name.
int64_t AttentionLayerOf(const std::string& name) {
  const std::string prefix = kLayersPrefix;
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  size_t end = prefix.size();
  while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
  if (end == prefix.size() || end - prefix.size() > 9) return -1;
  if (name.compare(end, 11, ".self_attn.") != 0) return -1;
  return std::stoll(name.substr(prefix.size(), end - prefix.size()));
}

// What a projection's weight must be: [rows, cols], and the words that explain the numbers.
struct Expected {
  int64_t rows, cols;
  std::string why;
};

Expected ExpectedWeight(const LlamaConfig& c, const std::string& proj) {
  const std::string e = "hidden_size " + std::to_string(c.hidden_size);
  const std::string q = "num_attention_heads " + std::to_string(c.num_attention_heads) +
                        " * head_dim " + std::to_string(c.head_dim);
  const std::string kv = "num_key_value_heads " + std::to_string(c.num_key_value_heads) +
                         " * head_dim " + std::to_string(c.head_dim);
  if (proj == "q_proj") return {c.q_dim(), c.hidden_size, "[" + q + ", " + e + "]"};
  if (proj == "o_proj") return {c.hidden_size, c.q_dim(), "[" + e + ", " + q + "]"};
  return {c.kv_dim(), c.hidden_size, "[" + kv + ", " + e + "]"};
}

StatusOr<at::Tensor> Take(const TensorMap& tensors, const std::string& source,
                          const std::string& name, std::vector<int64_t> shape,
                          const std::string& why, int64_t layers) {
  auto it = tensors.find(name);
  if (it == tensors.end()) {
    return InvalidArgument(source + ": tensor '" + name + "' is missing (num_hidden_layers " +
                           std::to_string(layers) + ")");
  }
  const at::Tensor& t = it->second;
  if (!at::isFloatingType(t.scalar_type())) {
    return InvalidArgument(source + ": tensor '" + name + "' has dtype " +
                           std::string(c10::toString(t.scalar_type())) +
                           ", expected a floating dtype");
  }
  if (!t.sizes().equals(shape)) {
    return InvalidArgument(source + ": tensor '" + name + "' has shape " + ShapeString(t.sizes()) +
                           ", expected " + ShapeString(shape) + " " + why);
  }
  return t;
}

StatusOr<LlamaLayerWeights> LayerFromTensors(const LlamaConfig& c, const TensorMap& tensors,
                                             const std::string& source, int64_t layer) {
  at::Tensor* weights[4];
  at::Tensor* biases[4];
  LlamaLayerWeights w;
  weights[0] = &w.q_weight, weights[1] = &w.k_weight, weights[2] = &w.v_weight;
  weights[3] = &w.o_weight;
  biases[0] = &w.q_bias, biases[1] = &w.k_bias, biases[2] = &w.v_bias, biases[3] = &w.o_bias;
  for (int i = 0; i < 4; ++i) {
    const std::string proj = kProjections[i];
    const Expected x = ExpectedWeight(c, proj);
    auto weight = Take(tensors, source, LlamaTensorName(layer, kProjections[i], "weight"),
                       {x.rows, x.cols}, x.why, c.num_hidden_layers);
    if (!weight.ok()) return weight.status();
    *weights[i] = *weight;
    const std::string bias_name = LlamaTensorName(layer, kProjections[i], "bias");
    if (!c.attention_bias) {
      if (tensors.count(bias_name) != 0) {
        return InvalidArgument(source + ": tensor '" + bias_name +
                               "' is present but config.json's attention_bias is false");
      }
      continue;
    }
    auto bias =
        Take(tensors, source, bias_name, {x.rows}, "(attention_bias is true)", c.num_hidden_layers);
    if (!bias.ok()) return bias.status();
    *biases[i] = *bias;
  }
  return w;
}

StatusOr<Json> ReadJsonFile(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) return NotFound(path + ": cannot open " + what);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const std::string too_deep = internal::JsonDepthError(text, path, what);
  if (!too_deep.empty()) return InvalidArgument(too_deep);
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return InvalidArgument(path + ": " + what + " is not a JSON object");
  }
  return json;
}

// The shards of a model.safetensors.index.json that hold attention tensors.
StatusOr<std::vector<std::string>> ShardsOf(const std::string& index_path) {
  auto index = ReadJsonFile(index_path, "safetensors index");
  if (!index.ok()) return index.status();
  auto map = index->find("weight_map");
  if (map == index->end() || !map->is_object()) {
    return InvalidArgument(index_path + ": 'weight_map' must be an object {tensor: file}");
  }
  std::set<std::string> shards;
  for (const auto& [name, file] : map->items()) {
    if (!IsLlamaAttentionTensor(name)) continue;
    if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
      return InvalidArgument(index_path + ": weight_map['" + name +
                             "'] must be a file name in the folder");
    }
    shards.insert((fs::path(index_path).parent_path() / file.get<std::string>()).string());
  }
  return std::vector<std::string>(shards.begin(), shards.end());
}

// The safetensors files of a checkpoint path and its config.json's default place.
StatusOr<std::vector<std::string>> CheckpointFiles(const std::string& path, std::string* config) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return NotFound(path + ": no such checkpoint folder or .safetensors file");
  }
  if (!fs::is_directory(path, ec)) {
    *config = (fs::path(path).parent_path() / "config.json").string();
    return std::vector<std::string>{path};
  }
  *config = (fs::path(path) / "config.json").string();
  const fs::path single = fs::path(path) / "model.safetensors";
  if (fs::is_regular_file(single, ec)) return std::vector<std::string>{single.string()};
  const fs::path index = fs::path(path) / "model.safetensors.index.json";
  if (fs::is_regular_file(index, ec)) return ShardsOf(index.string());
  return NotFound(path + ": neither model.safetensors nor model.safetensors.index.json in it");
}

}  // namespace

std::string LlamaTensorName(int64_t layer, const char* proj, const char* kind) {
  return std::string(kLayersPrefix) + std::to_string(layer) + ".self_attn." + proj + "." + kind;
}

bool IsLlamaAttentionTensor(const std::string& name) {
  const int64_t layer = AttentionLayerOf(name);
  if (layer < 0) return false;
  for (const char* proj : kProjections) {
    for (const char* kind : {"weight", "bias"}) {
      if (name == LlamaTensorName(layer, proj, kind)) return true;
    }
  }
  return false;
}

StatusOr<std::vector<LlamaLayerWeights>> LlamaLayersFromTensors(const LlamaConfig& config,
                                                                const TensorMap& tensors,
                                                                const std::string& source) {
  if (Status s = config.Validate(); !s.ok()) return InvalidArgument(source + ": " + s.message());
  for (const auto& [name, tensor] : tensors) {
    if (IsLlamaAttentionTensor(name) && AttentionLayerOf(name) >= config.num_hidden_layers) {
      return InvalidArgument(source + ": tensor '" + name + "' belongs to layer " +
                             std::to_string(AttentionLayerOf(name)) + " but num_hidden_layers is " +
                             std::to_string(config.num_hidden_layers));
    }
  }
  std::vector<LlamaLayerWeights> layers;
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    auto layer = LayerFromTensors(config, tensors, source, i);
    if (!layer.ok()) return layer.status();
    layers.push_back(std::move(layer.value()));
  }
  return layers;
}

StatusOr<LlamaCheckpoint> LoadLlamaCheckpoint(const std::string& path,
                                              const std::string& config_path) {
  LlamaCheckpoint checkpoint;
  auto files = CheckpointFiles(path, &checkpoint.config_path);
  if (!files.ok()) return files.status();
  if (!config_path.empty()) checkpoint.config_path = config_path;
  auto config = ReadLlamaConfig(checkpoint.config_path);
  if (!config.ok()) return config.status();
  checkpoint.config = *config;
  TensorMap tensors;
  for (const std::string& file : *files) {
    auto read = ReadSafetensors(file, IsLlamaAttentionTensor);
    if (!read.ok()) return read.status();
    tensors.merge(read.value());
  }
  const std::string source = files->size() == 1 ? files->front() : path;
  auto layers = LlamaLayersFromTensors(checkpoint.config, tensors, source);
  if (!layers.ok()) return layers.status();
  checkpoint.layers = std::move(layers.value());
  checkpoint.files = std::move(files.value());
  return checkpoint;
}

StatusOr<std::vector<std::string>> LlamaCheckpointFiles(const std::string& folder) {
  std::string config;
  auto files = CheckpointFiles(folder, &config);
  if (!files.ok()) return files.status();
  std::error_code ec;
  const fs::path index = fs::path(folder) / "model.safetensors.index.json";
  if (!fs::is_regular_file(fs::path(folder) / "model.safetensors", ec) &&
      fs::is_regular_file(index, ec)) {
    files->insert(files->begin(), index.string());
  }
  return files;
}

}  // namespace mha
