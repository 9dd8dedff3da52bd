// A KV cache's tokens as bytes and back, for a store outside the process (the serving layer's
// shared KV tier): ExportKvTokens copies the keys and values of some positions of every row out,
// ImportKvTokens appends such bytes to a cache exactly. The bytes are the keys, the values, then
// for a scaled cache dtype (int8, fp8_e4m3) their scales, each [rows, count, heads, x] as the pool
// stores it (KvCache::ExportStored), so rows * count * pool.bytes_per_token() of them. Torch-free
// header: the serving layer carries bytes.
#pragma once

#include <cstdint>
#include <string>

#include "mha/kv_cache.h"
#include "mha/status.h"

namespace mha {

// The pool's cache dtype: "float32", "float16", "bfloat16", "int8" or "fp8_e4m3".
std::string KvDtypeName(const KvBlockPool& pool);
// Bytes of one stored key or value element (4, 2 or 1), its scales aside.
int64_t KvElementBytes(const KvBlockPool& pool);

// Copies positions [begin, begin + count) of every row of `cache` into `out` (rows * count *
// bytes_per_token bytes). OUT_OF_RANGE past the cache's length; FAILED_PRECONDITION for a spilled
// cache.
Status ExportKvTokens(const KvCache& cache, int64_t begin, int64_t count, void* out);

// Appends `count` tokens per row from `data` (as ExportKvTokens writes them) at the cache's
// length: blocks taken first (RESOURCE_EXHAUSTED with nothing changed when the pool is short).
Status ImportKvTokens(KvCache* cache, const void* data, int64_t count);

}  // namespace mha
