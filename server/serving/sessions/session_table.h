// SessionTable: the decoding sessions of one model version, whatever its kind's cache: the map of
// sessions, the version's KV block pool, their entries in the server-wide SessionDirectory, idle
// expiry, LRU eviction under --kv-cache-full-policy evict-lru (never a session a step holds) and
// the session metrics. Each kind's store (sessions/session_store.h for one-layer models; a kind's
// own folder for the others) keeps its own lock and calls the *Locked functions with it held. A
// step holds its sessions through the table's StepGate (sessions/step_gate.h), the same for every
// kind.
//
// A Session type has: `SessionInfo info`, `std::unique_ptr<Cache> cache` (Release(),
// blocks_held()), `Clock::time_point last_used`, `bool ended`, and `StepLine steps` (the steps
// that hold it: a step is waiting or running on it while it is not empty).
#pragma once

#include <spdlog/spdlog.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mha/engine.h"
#include "mha/kv_cache.h"
#include "server/serving/clock.h"
#include "server/serving/observability/stats_aggregator.h"
#include "server/serving/sessions/session_directory.h"
#include "server/serving/sessions/session_options.h"
#include "server/serving/sessions/step_gate.h"

namespace mha::serve {

struct SessionInfo {
  std::string id;
  bool cross = false;
  int64_t batch_size = 0, max_tokens = 0;
  int64_t tokens = 0;  // decoded per row so far
  int64_t blocks = 0;  // KV blocks held
  int64_t block_tokens = 0;
};

struct SessionUsage {
  int64_t sessions = 0, blocks_used = 0, blocks_total = 0, block_bytes = 0;
};

template <typename Session>
class SessionTable {
 public:
  using Ptr = std::shared_ptr<Session>;
  using Map = std::map<std::string, Ptr>;

  // `metrics` may be null.
  SessionTable(const SessionOptions& options, SessionLocation location,
               std::shared_ptr<SessionDirectory> directory, StatsAggregator* metrics)
      : options_(options),
        location_(std::move(location)),
        directory_(std::move(directory)),
        metrics_(metrics),
        gate_(options.max_pending_steps) {}

  // The pool, made by `make` on the first call; `describe` logs it once.
  Status EnsurePoolLocked(const std::function<StatusOr<std::shared_ptr<KvBlockPool>>()>& make,
                          const std::function<void(const KvBlockPool&)>& describe) {
    if (pool_) return Status::Ok();
    auto pool = make();
    if (!pool.ok()) return pool.status();
    pool_ = *pool;
    describe(*pool_);
    return Status::Ok();
  }
  const std::shared_ptr<KvBlockPool>& pool() const { return pool_; }

  Map& sessions() { return sessions_; }
  const StepGate& gate() const { return gate_; }
  SessionDirectory& directory() { return *directory_; }
  const SessionLocation& location() const { return location_; }

  // Registers `session` (its id, checked by the caller) server-wide and in the table.
  Status AddLocked(const Ptr& session) {
    MHA_RETURN_IF_ERROR(directory_->Add(session->info.id, location_));
    sessions_[session->info.id] = session;
    PublishLocked();
    return Status::Ok();
  }

  // Ends `session`: NOT_FOUND with `why` from now on; its blocks go back now, or when the step
  // holding it lets it go.
  void EndLocked(const Ptr& session, const std::string& why) {
    session->ended = true;
    directory_->End(session->info.id, why);
    sessions_.erase(session->info.id);
    if (!session->steps.held()) session->cache->Release();
  }

  // What a step waiting for session `id` is told when the session ends first.
  Status EndedWhileWaitingLocked(const std::string& id) const {
    return NotFound(directory_->NotFoundFor(id).message() + " (while this step waited)");
  }

  // Closes `session` (EndLocked with `why`): the steps waiting for it leave the gate into
  // `dropped` (the caller refuses them after unlocking: StepGate::Refuse) and those their leaving
  // lets start into `ready` (StepGate::Start); the step running keeps the cache until it leaves.
  void CloseLocked(const Ptr& session, const std::string& why,
                   std::vector<StepGate::Dropped>* dropped, std::vector<StepTurnPtr>* ready) {
    gate_.DropWaitingLocked(&session->steps, dropped, ready);
    EndLocked(session, why);
    PublishLocked();
  }

  // A step that held `sessions` through `turn` left: the ended ones give their blocks back once
  // nothing holds them. Returns the turns that may start now (StepGate::Start after unlocking).
  std::vector<StepTurnPtr> LeaveLocked(const StepTurnPtr& turn, const std::vector<Ptr>& sessions) {
    std::vector<StepTurnPtr> ready = gate_.LeaveLocked(turn);
    for (const Ptr& s : sessions) {
      if (s->ended && !s->steps.held()) s->cache->Release();
    }
    PublishLocked();
    return ready;
  }

  // Ends every session: the version is unloaded or replaced.
  void EndAllLocked() {
    const std::string why = "ended: its model '" + location_.model + "' version " +
                            location_.version + " was unloaded or replaced";
    for (auto& [id, session] : sessions_) directory_->End(id, why);
    sessions_.clear();
    PublishLocked();
  }

  // Ends the sessions no step holds that were idle longer than --session-idle-timeout-s.
  void SweepLocked(Clock::time_point now) {
    if (options_.idle_timeout_s <= 0) return;
    const auto timeout = std::chrono::seconds(options_.idle_timeout_s);
    std::vector<Ptr> expired;
    for (const auto& [id, session] : sessions_) {
      if (!session->steps.held() && now - session->last_used > timeout) expired.push_back(session);
    }
    for (const auto& session : expired) {
      EndLocked(session, "expired: idle for more than --session-idle-timeout-s " +
                             std::to_string(options_.idle_timeout_s) + " s");
    }
    if (!expired.empty()) PublishLocked();
  }

  // Frees `blocks` blocks under evict-lru by ending sessions no step holds (never `keep`), least
  // recently used first; under refuse, or when not enough are idle, RESOURCE_EXHAUSTED naming
  // `what` and the pool (`per_block`: what one block holds, in the kind's words).
  Status MakeRoomLocked(int64_t blocks, const Session* keep, const std::string& what,
                        const std::string& per_block) {
    while (pool_->free_blocks() < blocks && options_.full_policy == KvFullPolicy::kEvictLru) {
      Ptr victim;
      for (const auto& [id, s] : sessions_) {
        if (s.get() == keep || s->steps.held() || s->cache->blocks_held() == 0) continue;
        if (!victim || s->last_used < victim->last_used) victim = s;
      }
      if (!victim) break;
      spdlog::info("model {} v{}: evicting session {} ({} blocks) for {}", location_.model,
                   location_.version, victim->info.id, victim->cache->blocks_held(), what);
      EndLocked(victim,
                "was evicted (least recently used) to free KV cache blocks for another "
                "session (--kv-cache-full-policy evict-lru, --kv-cache-bytes)");
      if (metrics_) metrics_->RecordSessionEviction();
    }
    if (pool_->free_blocks() >= blocks) return Status::Ok();
    return ResourceExhausted("KV cache full: " + what + " needs " + std::to_string(blocks) +
                             " blocks, " + std::to_string(pool_->free_blocks()) + " of " +
                             std::to_string(pool_->total_blocks()) + " free (" + per_block +
                             "; --kv-cache-bytes, --kv-cache-full-policy " +
                             KvFullPolicyName(options_.full_policy) + ")");
  }

  SessionUsage UsageLocked() const {
    SessionUsage u;
    u.sessions = static_cast<int64_t>(sessions_.size());
    if (pool_) {
      u.blocks_used = pool_->used_blocks();
      u.blocks_total = pool_->total_blocks();
      u.block_bytes = pool_->block_bytes();
    }
    return u;
  }

  void PublishLocked() const {
    if (!metrics_ || !pool_) return;
    metrics_->SetSessionUsage(static_cast<int64_t>(sessions_.size()), pool_->used_blocks(),
                              pool_->total_blocks(), pool_->block_bytes());
  }

 private:
  const SessionOptions options_;
  const SessionLocation location_;
  const std::shared_ptr<SessionDirectory> directory_;
  StatsAggregator* const metrics_;
  const StepGate gate_;
  std::shared_ptr<KvBlockPool> pool_;  // made on the first EnsurePoolLocked
  Map sessions_;
};

}  // namespace mha::serve
