#include "mha/options.h"

#include <algorithm>
#include <cctype>

namespace mha {

StatusOr<DType> ParseDType(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  if (n == "float32" || n == "fp32" || n == "float") return DType::kFloat32;
  if (n == "float16" || n == "fp16" || n == "half") return DType::kFloat16;
  if (n == "bfloat16" || n == "bf16") return DType::kBFloat16;
  return InvalidArgument("dtype: unknown '" + name + "', expected float32, float16 or bfloat16");
}

int64_t AttentionBlockRows(int64_t batch, int64_t heads, int64_t t, int64_t keys,
                           int64_t element_bytes, int64_t block_bytes) {
  if (block_bytes <= 0 || t <= 1) return t;
  int64_t row_bytes = 1;  // one query row's scores over every batch row and head
  for (int64_t f : {batch, heads, keys, element_bytes}) {
    if (__builtin_mul_overflow(row_bytes, std::max<int64_t>(f, 1), &row_bytes)) return 1;
  }
  return std::clamp<int64_t>(block_bytes / row_bytes, 1, t);
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
  }
  return "float32";
}

Status MhaOptions::Validate() const {
  if (embed_dim <= 0) {
    return InvalidArgument("embed_dim must be > 0, got " + std::to_string(embed_dim));
  }
  if (num_heads <= 0) {
    return InvalidArgument("num_heads must be > 0, got " + std::to_string(num_heads));
  }
  if (embed_dim % num_heads != 0) {
    return InvalidArgument("embed_dim " + std::to_string(embed_dim) +
                           " is not divisible by num_heads " + std::to_string(num_heads));
  }
  if (kdim < 0 || vdim < 0) {
    return InvalidArgument("kdim and vdim must be >= 0 (0 = embed_dim), got kdim " +
                           std::to_string(kdim) + ", vdim " + std::to_string(vdim));
  }
  if (device.empty()) return InvalidArgument("device must not be empty (use \"auto\")");
  return Status::Ok();
}

}  // namespace mha
