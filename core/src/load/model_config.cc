#include "mha/model_config.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "load/json_text.h"
#include "mha/config_reader.h"

namespace mha {
namespace {

using Json = nlohmann::json;

constexpr int64_t kMaxDim = int64_t{1} << 32;

const char* const kCoreKeys[] = {"num_heads", "add_zero_attn", "prefix", "dtype", "device",
                                 "embed_dim", "kdim",          "vdim",   "bias",  "add_bias_kv"};

Status ReadKeys(const std::string& path, const Json& json, ModelConfig* c) {
  ConfigReader r(path, json);
  MHA_RETURN_IF_ERROR(r.Int("num_heads", 1, kMaxDim, &c->num_heads));
  MHA_RETURN_IF_ERROR(r.Bool("add_zero_attn", &c->add_zero_attn));
  MHA_RETURN_IF_ERROR(r.String("prefix", &c->prefix));
  MHA_RETURN_IF_ERROR(r.String("device", &c->device));
  std::optional<std::string> dtype;
  MHA_RETURN_IF_ERROR(r.String("dtype", &dtype));
  if (dtype) {
    auto parsed = ParseDType(*dtype);
    if (!parsed.ok()) return InvalidArgument(path + ": " + parsed.status().message());
    c->dtype = *parsed;
  }
  MHA_RETURN_IF_ERROR(r.Int("embed_dim", 1, kMaxDim, &c->embed_dim));
  MHA_RETURN_IF_ERROR(r.Int("kdim", 1, kMaxDim, &c->kdim));
  MHA_RETURN_IF_ERROR(r.Int("vdim", 1, kMaxDim, &c->vdim));
  MHA_RETURN_IF_ERROR(r.Bool("bias", &c->bias));
  MHA_RETURN_IF_ERROR(r.Bool("add_bias_kv", &c->add_bias_kv));
  for (const auto& item : json.items()) {
    bool known = false;
    for (const char* key : kCoreKeys) known = known || item.key() == key;
    if (!known) c->other_keys.push_back(item.key());
  }
  return Status::Ok();
}

// The file's text as JSON, its nesting bounded before nlohmann builds a tree (json_text.h).
StatusOr<Json> ParseConfigText(std::istream& in, const std::string& path) {
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const std::string too_deep = internal::JsonDepthError(text, path, "config");
  if (!too_deep.empty()) return InvalidArgument(too_deep);
  return Json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace

StatusOr<ModelConfig> ReadModelConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound(path + ": cannot open config file");
  return ParseModelConfig(in, path);
}

StatusOr<ModelConfig> ParseModelConfig(std::istream& in, const std::string& path) {
  auto parsed = ParseConfigText(in, path);
  if (!parsed.ok()) return parsed.status();
  return ModelConfigFromJson(std::move(parsed.value()), path);
}

StatusOr<ModelConfig> ModelConfigFromJson(Json object, const std::string& path) {
  if (object.is_discarded() || !object.is_object()) {
    return InvalidArgument(path + ": config is not a JSON object");
  }
  ModelConfig config;
  config.path = path;
  MHA_RETURN_IF_ERROR(ReadKeys(path, object, &config));
  config.json = std::make_shared<const Json>(std::move(object));
  return config;
}

std::string ModelConfigPathIn(const std::string& dir) {
  const std::filesystem::path candidate = std::filesystem::path(dir) / "config.json";
  std::error_code ec;
  return std::filesystem::is_regular_file(candidate, ec) ? candidate.string() : "";
}

}  // namespace mha
