#include "mha/llama_config.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "mha/config_reader.h"
#include "mha/model_config.h"

namespace mha {

namespace {

using Json = nlohmann::json;

constexpr int64_t kMaxDim = int64_t{1} << 32;

// rope_scaling, or rope_parameters of a rope_type other than "default": another formula.
Status CheckRopeKind(const std::string& path, const Json& json, std::optional<double>* theta) {
  if (auto it = json.find("rope_scaling"); it != json.end() && !it->is_null()) {
    return InvalidArgument(path + ": 'rope_scaling' is not supported (got " + JsonForMessage(*it) +
                           "): only the original RoPE is implemented");
  }
  auto it = json.find("rope_parameters");
  if (it == json.end() || it->is_null()) return Status::Ok();
  if (!it->is_object()) {
    return InvalidArgument(path + ": 'rope_parameters' must be an object, got " +
                           JsonForMessage(*it));
  }
  const std::string where = path + ": rope_parameters";
  ConfigReader r(where, *it);
  std::optional<std::string> type;
  MHA_RETURN_IF_ERROR(r.String("rope_type", &type));
  if (type && *type != "default") {
    return InvalidArgument(where + ": rope_type '" + *type +
                           "' is not supported: only \"default\" (the original RoPE)");
  }
  return r.Number("rope_theta", 1e-30, 1e300, theta);
}

Status ReadSlidingWindow(const ConfigReader& r, const Json& json, LlamaConfig* c) {
  std::optional<bool> use;
  MHA_RETURN_IF_ERROR(r.Bool("use_sliding_window", &use));
  if (auto it = json.find("sliding_window"); it == json.end() || it->is_null() || use == false) {
    return Status::Ok();
  }
  std::optional<int64_t> window;
  MHA_RETURN_IF_ERROR(r.Int("sliding_window", 1, kMaxDim, &window));
  c->sliding_window = *window;
  return Status::Ok();
}

Status Required(const std::string& path, const char* key, const std::optional<int64_t>& v) {
  if (v) return Status::Ok();
  return InvalidArgument(path + ": '" + key +
                         "' is required (a Llama-family config.json: hidden_size, "
                         "num_attention_heads, num_hidden_layers)");
}

Status ReadKeys(const std::string& path, const Json& json, LlamaConfig* c) {
  ConfigReader r(path, json);
  std::optional<int64_t> e, h, kv, d, positions, layers;
  MHA_RETURN_IF_ERROR(r.Int("hidden_size", 1, kMaxDim, &e));
  MHA_RETURN_IF_ERROR(r.Int("num_attention_heads", 1, kMaxDim, &h));
  MHA_RETURN_IF_ERROR(r.Int("num_key_value_heads", 1, kMaxDim, &kv));
  MHA_RETURN_IF_ERROR(r.Int("head_dim", 1, kMaxDim, &d));
  MHA_RETURN_IF_ERROR(r.Int("max_position_embeddings", 1, kMaxDim, &positions));
  MHA_RETURN_IF_ERROR(r.Int("num_hidden_layers", 1, kMaxDim, &layers));
  for (const auto& [key, v] : {std::pair{"hidden_size", e}, std::pair{"num_attention_heads", h},
                               std::pair{"num_hidden_layers", layers}}) {
    MHA_RETURN_IF_ERROR(Required(path, key, v));
  }
  std::optional<double> theta;
  MHA_RETURN_IF_ERROR(CheckRopeKind(path, json, &theta));
  MHA_RETURN_IF_ERROR(r.Number("rope_theta", 1e-30, 1e300, &theta));
  std::optional<bool> bias;
  MHA_RETURN_IF_ERROR(r.Bool("attention_bias", &bias));
  MHA_RETURN_IF_ERROR(ReadSlidingWindow(r, json, c));
  c->hidden_size = *e;
  c->num_attention_heads = *h;
  c->num_key_value_heads = kv.value_or(*h);
  if (!d && *e % *h != 0) {
    return InvalidArgument(path + ": hidden_size " + std::to_string(*e) +
                           " is not a multiple of num_attention_heads " + std::to_string(*h) +
                           " and no head_dim is given");
  }
  c->head_dim = d.value_or(*e / *h);
  c->rope_theta = theta.value_or(c->rope_theta);
  c->max_position_embeddings = positions.value_or(c->max_position_embeddings);
  c->num_hidden_layers = *layers;
  c->attention_bias = bias.value_or(false);
  return Status::Ok();
}

}  // namespace

int64_t LlamaConfig::max_positions() const {
  return sliding_window > 0 ? std::min(max_position_embeddings, sliding_window)
                            : max_position_embeddings;
}

Status LlamaConfig::Validate() const {
  const std::pair<const char*, int64_t> sizes[] = {
      {"hidden_size", hidden_size},
      {"num_attention_heads", num_attention_heads},
      {"num_key_value_heads", num_key_value_heads},
      {"head_dim", head_dim},
      {"max_position_embeddings", max_position_embeddings},
      {"num_hidden_layers", num_hidden_layers}};
  for (const auto& [name, value] : sizes) {
    if (value < 1)
      return InvalidArgument(std::string(name) + " must be >= 1, got " + std::to_string(value));
  }
  if (num_key_value_heads > num_attention_heads) {
    return InvalidArgument("num_key_value_heads " + std::to_string(num_key_value_heads) +
                           " exceeds num_attention_heads " + std::to_string(num_attention_heads));
  }
  if (num_attention_heads % num_key_value_heads != 0) {
    return InvalidArgument("num_attention_heads " + std::to_string(num_attention_heads) +
                           " is not a multiple of num_key_value_heads " +
                           std::to_string(num_key_value_heads) +
                           " (each K/V head serves the same number of query heads)");
  }
  if (head_dim % 2 != 0) {
    return InvalidArgument("head_dim " + std::to_string(head_dim) +
                           " must be even (RoPE rotates the two halves of each head)");
  }
  if (!(rope_theta > 0)) {
    return InvalidArgument("rope_theta must be > 0, got " + std::to_string(rope_theta));
  }
  return Status::Ok();
}

StatusOr<LlamaConfig> ReadLlamaConfig(const std::string& path) {
  auto parsed = ReadModelConfig(path);  // the one bounded parse of a config.json
  if (!parsed.ok()) return parsed.status();
  return LlamaConfigFromJson(*parsed->json, path);
}

StatusOr<LlamaConfig> LlamaConfigFromJson(const Json& json, const std::string& path) {
  if (!json.is_object()) return InvalidArgument(path + ": config is not a JSON object");
  LlamaConfig config;
  MHA_RETURN_IF_ERROR(ReadKeys(path, json, &config));
  if (Status s = config.Validate(); !s.ok()) return InvalidArgument(path + ": " + s.message());
  return config;
}

bool IsLlamaConfig(const Json& json) {
  return json.is_object() && json.contains("hidden_size") && json.contains("num_attention_heads") &&
         json.contains("num_hidden_layers");
}

}  // namespace mha
