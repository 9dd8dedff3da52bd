// KvTier: the shared KV tier of one server (--kv-store redis://host:port[/db], docs/scale-out.md):
// the sessions of every version of every kind written to Redis, so that they outlive this replica.
// It holds the Redis client, the store of records and blocks (redis_kv_store.h), the leases
// (redis_leases.h), the write-behind queue (kv_write_queue.h), the listener of release requests
// (release_listener.h) and a thread that renews this replica's leases and, when Redis comes back
// after an outage, lets every store catch up (claim missing leases, write again what failed).
// Each version's SessionStore registers itself (DurableSessions) while it lives.
//
// Off the step's path: a step never waits on Redis. Open and Fork claim a lease (one round trip,
// bounded by --kv-store-timeout-ms; an unreachable store costs one connect timeout at most, then
// fails fast until it answers again: the session opens anyway, not durable, counted). A call for a
// session this replica does not hold waits for its restore (bounded: the handover timeout plus
// the reads).
#pragma once

#include <prometheus/metric_family.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "mha/status.h"
#include "server/serving/sessions/kv_tier_options.h"
#include "server/serving/sessions/kv_write_queue.h"
#include "server/serving/sessions/redis/redis_client.h"
#include "server/serving/sessions/redis/redis_kv_store.h"
#include "server/serving/sessions/redis/redis_leases.h"
#include "server/serving/sessions/redis/release_listener.h"
#include "server/serving/sessions/session_durability.h"

namespace mha::serve {

// What the tier counted (for /metrics and tests).
struct KvTierCounters {
  int64_t released = 0, restored = 0;  // handovers out and in
  int64_t restored_tokens = 0;         // tokens per row restored
  int64_t lost_tokens = 0;             // tokens per row a crash cost (restored sessions)
  double restore_seconds = 0;          // over every restore
  int64_t restore_bytes = 0;           // bytes read by restores
  int64_t not_durable_opens = 0;       // sessions opened or forked without a lease
};

class KvTier {
 public:
  // Off (null) when options.url is empty. INVALID_ARGUMENT for a bad URL or password source;
  // with `required`, the store's refusal when it cannot be reached or refuses the password (else a
  // warning, and the tier starts degraded).
  static StatusOr<std::shared_ptr<KvTier>> Create(const KvTierOptions& options);
  ~KvTier();
  KvTier(const KvTier&) = delete;
  KvTier& operator=(const KvTier&) = delete;

  bool write_behind() const { return options_.write_behind; }
  const KvTierOptions& options() const { return options_; }
  RedisKvStore& store() { return *store_; }
  RedisLeases& leases() { return *leases_; }
  KvWriteQueue& queue() { return queue_; }
  bool reachable() const { return reachable_; }

  void Register(DurableSessions* sessions);
  void Unregister(DurableSessions* sessions);

  // The lease of a new session `id` (Open, Fork), waiting (bounded) for a holder that is gone; a
  // record left under the id is removed. ALREADY_EXISTS when a live replica holds it. nullopt when
  // the store cannot be reached (the session opens, not durable; counted).
  StatusOr<std::optional<SessionLease>> Claim(const std::string& id);
  // Every registered store's sessions written and released (SIGTERM), until `deadline`: how many.
  int64_t ReleaseAll(std::chrono::steady_clock::time_point deadline);

  void RecordRelease() { ++released_; }
  void RecordRestore(int64_t tokens, int64_t lost, int64_t bytes, double seconds);
  KvTierCounters counters() const;
  std::vector<prometheus::MetricFamily> Collect() const;

 private:
  KvTier(const KvTierOptions& options, std::shared_ptr<RedisClient> client);
  void RenewLoop();
  void RenewOnce();
  void OnReleaseRequest(const std::string& id);

  const KvTierOptions options_;
  const std::shared_ptr<RedisClient> client_;
  std::unique_ptr<RedisKvStore> store_;
  std::unique_ptr<RedisLeases> leases_;
  KvWriteQueue queue_;
  std::atomic<bool> reachable_{false};
  std::atomic<int64_t> released_{0}, restored_{0}, restored_tokens_{0}, lost_tokens_{0};
  std::atomic<int64_t> restore_bytes_{0}, restore_micros_{0}, not_durable_opens_{0};
  std::atomic<int64_t> not_durable_{0};  // sessions, after the last catch-up

  std::mutex registry_mu_;                 // taken before any store's lock, never after
  std::set<DurableSessions*> registered_;  // guarded by registry_mu_
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;  // guarded by stop_mu_
  std::unique_ptr<ReleaseListener> listener_;
  std::thread renewer_;
};

}  // namespace mha::serve
