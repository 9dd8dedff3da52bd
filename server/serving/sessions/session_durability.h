// What a session holds in the shared KV tier (kv_tier.h), kept with the session (SessionState)
// under its store's lock, and what a version's store offers the tier (DurableSessions).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/serving/sessions/redis/redis_leases.h"

namespace mha::serve {

struct SessionDurability {
  bool leased = false;  // holds `lease` (false: opened while the store was unreachable)
  SessionLease lease;
  // Per layer, the keys of the blocks written or queued, in order: block j holds tokens
  // [j * block_tokens, ...) of every row; all full but maybe the last (a release writes a partial
  // one, replaced when it fills).
  std::vector<std::vector<std::string>> blocks;
  std::vector<int64_t> tokens;  // per layer: the tokens those blocks hold
  // Set by a queued write that failed or could not be queued: CatchUp writes the session again.
  // Shared with the writes in flight (they may finish after the session ends).
  std::shared_ptr<std::atomic<bool>> failed = std::make_shared<std::atomic<bool>>(false);
  int64_t resync_tokens = -1;  // >= 0: restored after its owner was lost; the next step is
                               // refused saying so (the client replays from there)
  int64_t block_tokens = 0;    // tokens per stored block (the pool's, or its record's)
  bool leaving = false;        // being released: new steps are refused UNAVAILABLE (retry)
};

// A version's store as the tier sees it (SessionStore<Cache> implements it).
class DurableSessions {
 public:
  virtual ~DurableSessions() = default;
  // Another replica needs session `id`: once no step holds it, it is written whole (partial
  // blocks too) and its lease released, and it ends here. False when it is not here.
  virtual bool ReleaseForHandover(const std::string& id) = 0;
  // ReleaseForHandover of every session (a drain), until `deadline`; the sessions released.
  virtual int64_t ReleaseAll(std::chrono::steady_clock::time_point deadline) = 0;
  // The leases held (renewed by the tier).
  virtual std::vector<SessionLease> Leases() = 0;
  // The tier found session `id`'s lease taken by another replica: it ends here.
  virtual void LeaseLost(const std::string& id) = 0;
  // The store is reachable again: sessions without a lease claim one, failed writes are queued
  // again. The sessions still not durable after it.
  virtual int64_t CatchUp() = 0;
};

}  // namespace mha::serve
