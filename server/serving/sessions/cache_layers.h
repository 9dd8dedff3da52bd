// A session cache's layers as KV caches, whatever its kind: a one-layer session's KvCache is its
// only layer; a kind whose sessions hold several caches declares the same three functions for its
// cache type in its own folder, in the cache type's namespace (found by argument-dependent lookup
// where session_kv.h calls them). The shared KV tier
// (session_kv.h) writes and restores sessions layer by layer through these.
#pragma once

#include <cstdint>

#include "mha/kv_cache.h"

namespace mha {

inline int64_t CacheLayerCount(const KvCache&) { return 1; }
inline const KvCache& CacheLayer(const KvCache& cache, int64_t) { return cache; }
inline KvCache* MutableCacheLayer(KvCache& cache, int64_t) { return &cache; }

}  // namespace mha
