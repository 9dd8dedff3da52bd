#include "mha/kv_cache_dtype.h"

#include <array>
#include <utility>

#include "kv/kv_quant.h"

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

KvCacheDtype ResolveKvCacheDtype(KvCacheDtype dtype, DType compute) {
  if (dtype != KvCacheDtype::kModel) return dtype;
  switch (compute) {
    case DType::kFloat16:
      return KvCacheDtype::kFloat16;
    case DType::kBFloat16:
      return KvCacheDtype::kBFloat16;
    case DType::kFloat32:
      break;
  }
  return KvCacheDtype::kFloat32;
}

int64_t KvCacheBytesPerToken(KvCacheDtype resolved, int64_t heads, int64_t head_dim) {
  switch (resolved) {
    case KvCacheDtype::kInt8:
    case KvCacheDtype::kFp8E4m3:
      return 2 * heads * (head_dim + 2 * int64_t{sizeof(float)});
    case KvCacheDtype::kBFloat16:
    case KvCacheDtype::kFloat16:
      return 2 * heads * head_dim * 2;
    case KvCacheDtype::kModel:
    case KvCacheDtype::kFloat32:
      break;
  }
  return 2 * heads * head_dim * 4;
}

Status CheckKvCacheDtype(KvCacheDtype dtype, const std::string& device) {
  const bool cuda = device.rfind("cuda", 0) == 0;
  return internal::KvStorageType(dtype, at::kFloat, cuda).status();
}

}  // namespace mha
