#include "mha/kv_cache_dtype.h"

#include <array>
#include <utility>

namespace mha {
namespace {

constexpr std::array<std::pair<KvCacheDtype, const char*>, 6> kNames = {{
    {KvCacheDtype::kModel, "model"},
    {KvCacheDtype::kFloat32, "fp32"},
    {KvCacheDtype::kBFloat16, "bf16"},
    {KvCacheDtype::kFloat16, "fp16"},
    {KvCacheDtype::kInt8, "int8"},
    {KvCacheDtype::kFp8E4m3, "fp8_e4m3"},
}};

}  // namespace

const char* KvCacheDtypeName(KvCacheDtype dtype) {
  for (const auto& [value, name] : kNames) {
    if (value == dtype) return name;
  }
  return "unknown";
}

std::string KvCacheDtypeChoices() {
  std::string out;
  for (const auto& [value, name] : kNames) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

StatusOr<KvCacheDtype> ParseKvCacheDtype(const std::string& name, const std::string& field) {
  for (const auto& [value, known] : kNames) {
    if (name == known) return value;
  }
  return InvalidArgument(field + ": unknown KV cache dtype '" + name +
                         "' (choices: " + KvCacheDtypeChoices() + ")");
}

bool KvCacheDtypeScaled(KvCacheDtype dtype) {
  return dtype == KvCacheDtype::kInt8 || dtype == KvCacheDtype::kFp8E4m3;
}

}  // namespace mha
