// The KV cache's tokens as bytes (mha/kv_export.h): the cache's stored bytes out and back in
// (KvCache::ExportStored / ImportStored), named by the pool's cache dtype.
#include "mha/kv_export.h"

namespace mha {

std::string KvDtypeName(const KvBlockPool& pool) {
  switch (pool.cache_dtype()) {
    case KvCacheDtype::kFloat16:
      return "float16";
    case KvCacheDtype::kBFloat16:
      return "bfloat16";
    case KvCacheDtype::kInt8:
      return "int8";
    case KvCacheDtype::kFp8E4m3:
      return "fp8_e4m3";
    case KvCacheDtype::kModel:
    case KvCacheDtype::kFloat32:
      break;
  }
  return "float32";
}

int64_t KvElementBytes(const KvBlockPool& pool) {
  const int64_t scales = pool.scaled() ? 2 * pool.heads() * 2 * int64_t{sizeof(float)} : 0;
  return (pool.bytes_per_token() - scales) / (2 * pool.heads() * pool.head_dim());
}

Status ExportKvTokens(const KvCache& cache, int64_t begin, int64_t count, void* out) {
  return cache.ExportStored(begin, count, out);
}

Status ImportKvTokens(KvCache* cache, const void* data, int64_t count) {
  return cache->ImportStored(data, count);
}

}  // namespace mha
