// A session cache's layers as KV caches, whatever its kind: a one-layer session's KvCache is its
// only layer; a Llama session's caches are its layers. The shared KV tier (session_kv.h) writes
// and restores sessions layer by layer through these.
#pragma once

#include <cstdint>

#include "mha/kv_cache.h"
#include "mha/llama_session_cache.h"

namespace mha::serve {

inline int64_t CacheLayerCount(const KvCache&) { return 1; }
inline const KvCache& CacheLayer(const KvCache& cache, int64_t) { return cache; }
inline KvCache* MutableCacheLayer(KvCache& cache, int64_t) { return &cache; }

inline int64_t CacheLayerCount(const LlamaSessionCache& cache) { return cache.num_layers(); }
// LlamaSessionCache::layer is not const; reading a layer through it changes nothing.
inline const KvCache& CacheLayer(const LlamaSessionCache& cache, int64_t l) {
  return *const_cast<LlamaSessionCache&>(cache).layer(l);
}
inline KvCache* MutableCacheLayer(LlamaSessionCache& cache, int64_t l) { return cache.layer(l); }

}  // namespace mha::serve
