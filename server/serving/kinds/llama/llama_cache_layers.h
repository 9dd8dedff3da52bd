// A Llama session's caches are its layers (sessions/cache_layers.h): how the shared KV tier
// (sessions/session_kv.h) walks them. In namespace mha, beside LlamaSessionCache, so that the
// tier's unqualified calls find them by argument-dependent lookup.
#pragma once

#include <cstdint>

#include "mha/kv_cache.h"
#include "mha/llama_session_cache.h"

namespace mha {

inline int64_t CacheLayerCount(const LlamaSessionCache& cache) { return cache.num_layers(); }
// LlamaSessionCache::layer is not const; reading a layer through it changes nothing.
inline const KvCache& CacheLayer(const LlamaSessionCache& cache, int64_t l) {
  return *const_cast<LlamaSessionCache&>(cache).layer(l);
}
inline KvCache* MutableCacheLayer(LlamaSessionCache& cache, int64_t l) { return cache.layer(l); }

}  // namespace mha
