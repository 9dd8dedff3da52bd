// The options of a model version's decoding sessions (both kinds' stores and their SessionTable):
// the KV pool, idle expiry, the full-pool policy and the steps waiting for a session. A step's
// limits are the server's RequestLimits (limits.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "mha/kv_cache.h"
#include "mha/status.h"
#include "server/serving/clock.h"

namespace mha::serve {

class KvTier;  // sessions/kv_tier.h

enum class KvFullPolicy {
  kRefuse,    // new sessions and steps that need blocks get RESOURCE_EXHAUSTED
  kEvictLru,  // idle sessions are evicted, least recently used first, until the blocks fit
  // idle sessions' blocks move to the version's spill store, least recently used first (evicted
  // when it is full), and come back at their next step
  kSpill,
};
// "refuse" / "evict-lru" / "spill".
StatusOr<KvFullPolicy> ParseKvFullPolicy(const std::string& name);
const char* KvFullPolicyName(KvFullPolicy policy);

struct SessionOptions {
  KvPoolOptions pool;            // per model version: --kv-cache-bytes, --kv-block-tokens
  int64_t idle_timeout_s = 600;  // --session-idle-timeout-s: idle longer ends it; 0 = never
  const ClockSource* clock = &RealClock();           // idle time is read here (tests: a FakeClock)
  KvFullPolicy full_policy = KvFullPolicy::kRefuse;  // --kv-cache-full-policy
  // Under spill: a pool on the CPU spills into files in a subdirectory of spill_dir made for the
  // version (removed with it), a pool on a GPU into host memory; both hold at most spill_bytes per
  // version.
  std::string spill_dir = "/tmp/mha-kv-spill";  // --kv-spill-dir
  int64_t spill_bytes = int64_t{1} << 30;       // --kv-spill-bytes
  size_t max_pending_steps = 16;  // steps of one session waiting behind the one in flight
  // The shared KV tier (--kv-store): made by ServerCore::Create; null = sessions live in this
  // process only.
  std::shared_ptr<KvTier> kv_tier;
};

}  // namespace mha::serve
