#include "mha/model_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>

#include "json_text.h"

namespace mha {
namespace {

using Json = nlohmann::json;

class Reader {
 public:
  Reader(const std::string& path, const Json& json) : path_(path), json_(json) {}

  Status Int(const char* key, int64_t minimum, int64_t maximum, std::optional<int64_t>* out) {
    const Json* v = Find(key);
    if (!v) return Status::Ok();
    if (!v->is_number_integer() || v->get<int64_t>() < minimum || v->get<int64_t>() > maximum ||
        (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(maximum))) {
      return Error(
          key, "an integer in [" + std::to_string(minimum) + ", " + std::to_string(maximum) + "]");
    }
    *out = v->get<int64_t>();
    return Status::Ok();
  }
  Status Bool(const char* key, std::optional<bool>* out) {
    const Json* v = Find(key);
    if (!v) return Status::Ok();
    if (!v->is_boolean()) return Error(key, "a boolean");
    *out = v->get<bool>();
    return Status::Ok();
  }
  Status String(const char* key, std::optional<std::string>* out) {
    const Json* v = Find(key);
    if (!v) return Status::Ok();
    if (!v->is_string()) return Error(key, "a string");
    *out = v->get<std::string>();
    return Status::Ok();
  }
  // A string, or an integer written as one ("version": 3).
  Status Label(const char* key, std::optional<std::string>* out) {
    const Json* v = Find(key);
    if (!v) return Status::Ok();
    if (v->is_number_integer()) {
      *out = std::to_string(v->get<int64_t>());
      return Status::Ok();
    }
    return String(key, out);
  }
  Status Error(const char* key, const std::string& wanted) const {
    return InvalidArgument(path_ + ": '" + key + "' must be " + wanted + ", got " +
                           internal::JsonForMessage(json_.at(key)));
  }

 private:
  const Json* Find(const char* key) const {
    auto it = json_.find(key);
    return it == json_.end() ? nullptr : &*it;
  }
  const std::string& path_;
  const Json& json_;
};

constexpr int64_t kMaxDim = int64_t{1} << 32;
constexpr int64_t kBig = std::numeric_limits<int64_t>::max();

const char* const kKnownKeys[] = {"num_heads",
                                  "add_zero_attn",
                                  "prefix",
                                  "dtype",
                                  "device",
                                  "embed_dim",
                                  "kdim",
                                  "vdim",
                                  "bias",
                                  "add_bias_kv",
                                  "version",
                                  "max_batch_size",
                                  "max_batch_tokens",
                                  "max_queue_delay_us",
                                  "max_queue_size",
                                  "instances",
                                  "version_policy",
                                  "warmup"};

// "version_policy": {"latest": {"num_versions": N}} | {"all": {}} | {"specific": {"versions":
// [..]}}
Status ReadVersionPolicy(const std::string& path, const Json& json, VersionPolicy* out) {
  auto it = json.find("version_policy");
  if (it == json.end()) return Status::Ok();
  const std::string where = path + ": 'version_policy'";
  if (!it->is_object() || it->size() != 1) {
    return InvalidArgument(where +
                           " must be an object with one key (latest, all or specific), got " +
                           internal::JsonForMessage(*it));
  }
  const std::string kind = it->begin().key();
  const Json& body = it->begin().value();
  if (!body.is_object()) {
    return InvalidArgument(where + "." + kind + " must be an object, got " +
                           internal::JsonForMessage(body));
  }
  if (kind == "all") {
    out->kind = VersionPolicy::Kind::kAll;
    return Status::Ok();
  }
  if (kind == "latest") {
    std::optional<int64_t> n;
    MHA_RETURN_IF_ERROR(
        Reader(path + " version_policy.latest", body).Int("num_versions", 1, 1 << 20, &n));
    out->kind = VersionPolicy::Kind::kLatest;
    out->num_versions = n.value_or(1);
    return Status::Ok();
  }
  if (kind != "specific") {
    return InvalidArgument(where + " must be latest, all or specific, got '" + kind + "'");
  }
  auto versions = body.find("versions");
  if (versions == body.end() || !versions->is_array() || versions->empty()) {
    return InvalidArgument(where + ".specific.versions must be a non-empty array of versions >= 1");
  }
  out->kind = VersionPolicy::Kind::kSpecific;
  for (const Json& v : *versions) {
    if (!v.is_number_integer() || v.get<int64_t>() < 1) {
      return InvalidArgument(where + ".specific.versions must hold integers >= 1, got " +
                             internal::JsonForMessage(v));
    }
    out->versions.push_back(v.get<int64_t>());
  }
  std::sort(out->versions.begin(), out->versions.end());
  out->versions.erase(std::unique(out->versions.begin(), out->versions.end()), out->versions.end());
  return Status::Ok();
}

// "warmup": [{"batch": 1, "seq": 16, "need_weights": true}, ...]
Status ReadWarmup(const std::string& path, const Json& json, std::vector<WarmupShape>* out,
                  bool* given) {
  auto it = json.find("warmup");
  if (it == json.end()) return Status::Ok();
  *given = true;
  if (!it->is_array() || it->size() > 64) {
    return InvalidArgument(path + ": 'warmup' must be an array of at most 64 shapes, got " +
                           internal::JsonForMessage(*it));
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& item = (*it)[i];
    const std::string where = path + " warmup[" + std::to_string(i) + "]";
    if (!item.is_object()) {
      return InvalidArgument(where + " must be an object like {\"batch\": 1, \"seq\": 16}, got " +
                             internal::JsonForMessage(item));
    }
    for (const auto& field : item.items()) {
      if (field.key() != "batch" && field.key() != "seq" && field.key() != "need_weights") {
        return InvalidArgument(where + ": unknown key '" + field.key() +
                               "' (batch, seq, need_weights)");
      }
    }
    Reader r(where, item);
    std::optional<int64_t> batch, seq;
    std::optional<bool> weights;
    MHA_RETURN_IF_ERROR(r.Int("batch", 1, 4096, &batch));
    MHA_RETURN_IF_ERROR(r.Int("seq", 1, 65536, &seq));
    MHA_RETURN_IF_ERROR(r.Bool("need_weights", &weights));
    out->push_back({batch.value_or(1), seq.value_or(16), weights.value_or(false)});
  }
  return Status::Ok();
}

Status ReadKeys(const std::string& path, const Json& json, ModelConfig* c) {
  Reader r(path, json);
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
  MHA_RETURN_IF_ERROR(r.Label("version", &c->version));
  MHA_RETURN_IF_ERROR(r.Int("max_batch_size", 1, kBig, &c->max_batch_size));
  MHA_RETURN_IF_ERROR(r.Int("max_batch_tokens", 1, kBig, &c->max_batch_tokens));
  MHA_RETURN_IF_ERROR(
      r.Int("max_queue_delay_us", 0, int64_t{3600} * 1000000, &c->max_queue_delay_us));
  MHA_RETURN_IF_ERROR(r.Int("max_queue_size", 1, int64_t{1} << 20, &c->max_queue_size));
  MHA_RETURN_IF_ERROR(r.Int("instances", 1, 256, &c->instances));
  MHA_RETURN_IF_ERROR(ReadVersionPolicy(path, json, &c->version_policy));
  MHA_RETURN_IF_ERROR(ReadWarmup(path, json, &c->warmup, &c->warmup_given));
  for (const auto& item : json.items()) {
    bool known = false;
    for (const char* key : kKnownKeys) known = known || item.key() == key;
    if (!known) c->unknown_keys.push_back(item.key());
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ModelConfig> ReadModelConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound(path + ": cannot open config file");
  return ParseModelConfig(in, path);
}

namespace {

// The file's text as JSON, its nesting bounded before nlohmann builds a tree (json_text.h).
StatusOr<Json> ParseConfigText(std::istream& in, const std::string& path) {
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const std::string too_deep = internal::JsonDepthError(text, path, "config");
  if (!too_deep.empty()) return InvalidArgument(too_deep);
  return Json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace

StatusOr<ModelConfig> ParseModelConfig(std::istream& in, const std::string& path) {
  auto parsed = ParseConfigText(in, path);
  if (!parsed.ok()) return parsed.status();
  const Json& json = parsed.value();
  if (json.is_discarded() || !json.is_object()) {
    return InvalidArgument(path + ": config is not a JSON object");
  }
  ModelConfig config;
  config.path = path;
  MHA_RETURN_IF_ERROR(ReadKeys(path, json, &config));
  return config;
}

StatusOr<ModelConfig> ReadLayeredModelConfig(const std::vector<std::string>& paths) {
  if (paths.empty()) return ModelConfig();
  Json merged = Json::object();
  for (const auto& path : paths) {
    MHA_RETURN_IF_ERROR(ReadModelConfig(path).status());  // errors name this file
    std::ifstream in(path);
    // Named: items() of a temporary would outlive it inside the loop.
    auto parsed = ParseConfigText(in, path);  // checked above
    if (!parsed.ok()) return parsed.status();
    const Json& json = parsed.value();
    for (const auto& item : json.items()) merged[item.key()] = item.value();
  }
  ModelConfig config;
  config.path = paths.back();
  MHA_RETURN_IF_ERROR(ReadKeys(paths.back(), merged, &config));
  return config;
}

std::string ModelConfigPathIn(const std::string& dir) {
  const std::filesystem::path candidate = std::filesystem::path(dir) / "config.json";
  std::error_code ec;
  return std::filesystem::is_regular_file(candidate, ec) ? candidate.string() : "";
}

}  // namespace mha
