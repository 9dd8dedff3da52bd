#include "server/serving/repository/serving_config.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "mha/config_reader.h"

namespace mha::serve {
namespace {

using Json = nlohmann::json;

constexpr int64_t kBig = std::numeric_limits<int64_t>::max();

const char* const kServingKeys[] = {
    "version",        "max_batch_rows", "max_batch_size", "max_batch_tokens", "max_queue_delay_us",
    "max_queue_size", "instances",      "version_policy", "warmup",           "kv_cache_dtype"};

// "kv_cache_dtype": one of mha/kv_cache_dtype.h's names; another value or type names the key and
// the choices.
Status ReadKvCacheDtype(const std::string& path, const Json& json, ServingConfig* c) {
  auto it = json.find("kv_cache_dtype");
  if (it == json.end()) return Status::Ok();
  const std::string field = path + ": 'kv_cache_dtype'";
  if (!it->is_string()) {
    return InvalidArgument(field + " must be a string (" + KvCacheDtypeChoices() + "), got " +
                           JsonForMessage(*it));
  }
  auto dtype = ParseKvCacheDtype(it->get<std::string>(), field);
  if (!dtype.ok()) return dtype.status();
  c->kv_cache_dtype = *dtype;
  return Status::Ok();
}

// "version_policy": {"latest": {"num_versions": N}} | {"all": {}} | {"specific": {"versions":
// [..]}}
Status ReadVersionPolicy(const std::string& path, const Json& json, VersionPolicy* out) {
  auto it = json.find("version_policy");
  if (it == json.end()) return Status::Ok();
  const std::string where = path + ": 'version_policy'";
  if (!it->is_object() || it->size() != 1) {
    return InvalidArgument(where +
                           " must be an object with one key (latest, all or specific), got " +
                           JsonForMessage(*it));
  }
  const std::string kind = it->begin().key();
  const Json body = it->begin().value();  // a copy: GCC 13 warns of a dangling reference
  if (!body.is_object()) {
    return InvalidArgument(where + "." + kind + " must be an object, got " + JsonForMessage(body));
  }
  if (kind == "all") {
    out->kind = VersionPolicy::Kind::kAll;
    return Status::Ok();
  }
  if (kind == "latest") {
    std::optional<int64_t> n;
    const std::string latest = path + " version_policy.latest";
    MHA_RETURN_IF_ERROR(ConfigReader(latest, body).Int("num_versions", 1, 1 << 20, &n));
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
                             JsonForMessage(v));
    }
    out->versions.push_back(v.get<int64_t>());
  }
  std::sort(out->versions.begin(), out->versions.end());
  out->versions.erase(std::unique(out->versions.begin(), out->versions.end()), out->versions.end());
  return Status::Ok();
}

// One item of "warmup": {"batch": 1, "seq": 16, "need_weights": true}.
StatusOr<WarmupShape> ReadWarmupShape(const std::string& where, const Json& item) {
  if (!item.is_object()) {
    return InvalidArgument(where + " must be an object like {\"batch\": 1, \"seq\": 16}, got " +
                           JsonForMessage(item));
  }
  for (const auto& field : item.items()) {
    if (field.key() != "batch" && field.key() != "seq" && field.key() != "need_weights") {
      return InvalidArgument(where + ": unknown key '" + field.key() +
                             "' (batch, seq, need_weights)");
    }
  }
  ConfigReader r(where, item);
  std::optional<int64_t> batch, seq;
  std::optional<bool> weights;
  MHA_RETURN_IF_ERROR(r.Int("batch", 1, 4096, &batch));
  MHA_RETURN_IF_ERROR(r.Int("seq", 1, 65536, &seq));
  MHA_RETURN_IF_ERROR(r.Bool("need_weights", &weights));
  return WarmupShape{batch.value_or(1), seq.value_or(16), weights.value_or(false)};
}

// "warmup": [{"batch": 1, "seq": 16, "need_weights": true}, ...]
Status ReadWarmup(const std::string& path, const Json& json, std::vector<WarmupShape>* out,
                  bool* given) {
  auto it = json.find("warmup");
  if (it == json.end()) return Status::Ok();
  *given = true;
  if (!it->is_array() || it->size() > 64) {
    return InvalidArgument(path + ": 'warmup' must be an array of at most 64 shapes, got " +
                           JsonForMessage(*it));
  }
  for (size_t i = 0; i < it->size(); ++i) {
    auto shape = ReadWarmupShape(path + " warmup[" + std::to_string(i) + "]", (*it)[i]);
    if (!shape.ok()) return shape.status();
    out->push_back(*shape);
  }
  return Status::Ok();
}

// "max_batch_rows" (as --max-batch-rows); "max_batch_size", its old name, still read with a
// warning (it was easy to take for --max-batch-size, which is per request).
Status ReadMaxBatchRows(const std::string& path, const Json& json, ConfigReader& r,
                        ServingConfig* c) {
  MHA_RETURN_IF_ERROR(r.Int("max_batch_rows", 1, kBig, &c->max_batch_rows));
  if (!json.contains("max_batch_size")) return Status::Ok();
  std::optional<int64_t> old;
  MHA_RETURN_IF_ERROR(r.Int("max_batch_size", 1, kBig, &old));
  if (c->max_batch_rows && *c->max_batch_rows != *old) {
    return InvalidArgument(path + ": max_batch_size " + std::to_string(*old) +
                           " (deprecated) contradicts max_batch_rows " +
                           std::to_string(*c->max_batch_rows) + "; keep max_batch_rows only");
  }
  spdlog::warn(
      "{}: max_batch_size is deprecated, use max_batch_rows (rows, the sum of the "
      "requests' B, of one merged pass; --max-batch-rows)",
      path);
  c->max_batch_rows = old;
  return Status::Ok();
}

Status ReadKeys(const std::string& path, const Json& json, ServingConfig* c) {
  ConfigReader r(path, json);
  MHA_RETURN_IF_ERROR(r.Label("version", &c->version));
  MHA_RETURN_IF_ERROR(ReadMaxBatchRows(path, json, r, c));
  MHA_RETURN_IF_ERROR(r.Int("max_batch_tokens", 1, kBig, &c->max_batch_tokens));
  MHA_RETURN_IF_ERROR(
      r.Int("max_queue_delay_us", 0, int64_t{3600} * 1000000, &c->max_queue_delay_us));
  MHA_RETURN_IF_ERROR(r.Int("max_queue_size", 1, int64_t{1} << 20, &c->max_queue_size));
  MHA_RETURN_IF_ERROR(r.Int("instances", 1, 256, &c->instances));
  MHA_RETURN_IF_ERROR(ReadKvCacheDtype(path, json, c));
  MHA_RETURN_IF_ERROR(ReadVersionPolicy(path, json, &c->version_policy));
  return ReadWarmup(path, json, &c->warmup, &c->warmup_given);
}

}  // namespace

StatusOr<ServingConfig> ServingConfigFrom(ModelConfig model) {
  ServingConfig config;
  config.model = std::move(model);
  if (config.model.json == nullptr) return config;
  MHA_RETURN_IF_ERROR(ReadKeys(config.model.path, *config.model.json, &config));
  for (const std::string& key : config.model.other_keys) {
    bool known = false;
    for (const char* serving : kServingKeys) known = known || key == serving;
    if (!known) config.unknown_keys.push_back(key);
  }
  return config;
}

StatusOr<ServingConfig> ReadServingConfig(const std::string& path) {
  auto model = ReadModelConfig(path);
  if (!model.ok()) return model.status();
  return ServingConfigFrom(std::move(model.value()));
}

StatusOr<ServingConfig> ReadLayeredServingConfig(const std::vector<std::string>& paths) {
  if (paths.empty()) return ServingConfig();
  Json merged = Json::object();
  for (const auto& path : paths) {
    auto config = ReadServingConfig(path);  // errors name this file
    if (!config.ok()) return config.status();
    for (const auto& item : config->model.json->items()) merged[item.key()] = item.value();
  }
  auto model = ModelConfigFromJson(std::move(merged), paths.back());
  if (!model.ok()) return model.status();
  return ServingConfigFrom(std::move(model.value()));
}

}  // namespace mha::serve
