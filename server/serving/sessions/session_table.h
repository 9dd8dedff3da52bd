// SessionTable: the decoding sessions of one model version, whatever its kind's cache: the map of
// sessions, the version's KV block pool, their entries in the server-wide SessionDirectory, idle
// expiry, LRU eviction under --kv-cache-full-policy evict-lru (never a session a step holds), LRU
// spill under --kv-cache-full-policy spill (and the restore at a spilled session's next step) and
// the session metrics. The version's SessionStore (session_store.h) owns it and calls the *Locked
// functions with its lock held. A step holds its sessions through the table's StepGate
// (step_gate.h), the same for every kind.
//
// A kind's Cache has: Release(), blocks_held(), shared_blocks_held(), Spill(store, key),
// Restore(), spilled(), spilled_bytes(), BlocksToRestore(), Fork(tokens), TruncateTo(tokens): the
// core's session caches (a one-layer session's cache, a stack's cache of one per layer).
#pragma once

#include <spdlog/spdlog.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mha/engine.h"
#include "mha/kv_cache.h"
#include "mha/kv_spill.h"
#include "mha/text.h"
#include "server/serving/caller_thread.h"
#include "server/serving/clock.h"
#include "server/serving/observability/stats_aggregator.h"
#include "server/serving/sessions/session_directory.h"
#include "server/serving/sessions/session_durability.h"
#include "server/serving/sessions/session_options.h"
#include "server/serving/sessions/session_spill.h"
#include "server/serving/sessions/sessions.h"
#include "server/serving/sessions/step_gate.h"

namespace mha::serve {

// One open session of a kind whose cache is a `Cache`.
template <typename Cache>
struct SessionState {
  SessionInfo info;
  std::unique_ptr<Cache> cache;
  Clock::time_point last_used;
  bool ended = false;
  StepLine steps;  // the steps that hold it: one is waiting or running on it while not empty
  SessionDurability durable;  // what it holds in the shared KV tier (session_kv.h)
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

  // The pool, made by `make` on the first call; `describe` logs it once. Under the spill policy,
  // the version's spill store too (files for a pool on the CPU, `device` "cpu").
  Status EnsurePoolLocked(const std::function<StatusOr<std::shared_ptr<KvBlockPool>>()>& make,
                          const std::function<void(const KvBlockPool&)>& describe,
                          const std::string& device) {
    if (pool_) return Status::Ok();
    if (options_.full_policy == KvFullPolicy::kSpill && !spill_) {
      auto spill = MakeSpillStore(options_, location_, device == "cpu");
      if (!spill.ok()) return spill.status();
      spill_ = *spill;
      spdlog::info("model {} v{}: KV spill store in {} (at most {} bytes)", location_.model,
                   location_.version, spill_->Describe(), spill_->max_bytes());
    }
    auto pool = make();
    if (!pool.ok()) return pool.status();
    pool_ = *pool;
    describe(*pool_);
    return Status::Ok();
  }
  const std::shared_ptr<KvSpillStore>& spill_store() const { return spill_; }
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
  // A session opened under `id` ("" = a new one), with the blocks it took, used `now`: registered
  // as AddLocked does (the directory spans every version: an id open anywhere on this server is
  // refused here, atomically, and the session's blocks go back with it).
  StatusOr<SessionInfo> OpenLocked(const Ptr& session, const std::string& id,
                                   Clock::time_point now) {
    session->info.id = id.empty() ? NewSessionId() : id;
    session->info.blocks = session->cache->blocks_held();
    session->last_used = now;
    MHA_RETURN_IF_ERROR(AddLocked(session));
    return session->info;
  }

  // Runs when a session ends here for good (closed, expired, evicted; not a restorable end nor a
  // version unloaded): the shared KV tier removes it (SessionStore sets it).
  void set_on_removed(std::function<void(const Session&)> on_removed) {
    on_removed_ = std::move(on_removed);
  }

  // Ends `session`: NOT_FOUND with `why` from now on; its blocks go back now, or when the step
  // holding it lets it go. `restorable`: it left for the shared KV store (SessionDirectory::End).
  void EndLocked(const Ptr& session, const std::string& why, bool restorable = false) {
    if (session->cache->spilled()) --spilled_sessions_;
    session->ended = true;
    directory_->End(session->info.id, why, restorable);
    if (!restorable && on_removed_) on_removed_(*session);
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
                   std::vector<StepGate::Dropped>* dropped, std::vector<StepTurnPtr>* ready,
                   bool restorable = false) {
    gate_.DropWaitingLocked(&session->steps, dropped, ready);
    EndLocked(session, why, restorable);
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

  // Ends every session: the version is unloaded or replaced. The steps still waiting for one go
  // to `dropped` (the caller refuses them with `*why` after unlocking); a step running keeps its
  // sessions' caches until it leaves.
  void EndAllLocked(std::vector<StepGate::Dropped>* dropped, Status* why) {
    const std::string reason = "ended: its model '" + location_.model + "' version " +
                               location_.version + " was unloaded or replaced";
    std::vector<StepTurnPtr> ready;  // none can start: every line's waiting turns leave
    for (auto& [id, session] : sessions_) {
      gate_.DropWaitingLocked(&session->steps, dropped, &ready);
      session->ended = true;
      directory_->End(id, reason);
    }
    *why = NotFound("session " + reason + " (while this step waited)");
    sessions_.clear();
    spilled_sessions_ = 0;
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
  // A spill blocks `caller` (caller_thread.h) for its write.
  Status MakeRoomLocked(int64_t blocks, const Session* keep, const std::string& what,
                        const std::string& per_block, CallerThread& caller) {
    bool changed = false;
    while (pool_->free_blocks() < blocks && options_.full_policy != KvFullPolicy::kRefuse) {
      Ptr victim = LeastRecentlyUsedIdleLocked(keep);
      if (!victim) break;
      changed = true;
      std::string why =
          "was evicted (least recently used) to free KV cache blocks for another session "
          "(--kv-cache-full-policy evict-lru, --kv-cache-bytes)";
      if (options_.full_policy == KvFullPolicy::kSpill) {
        caller.BeforeBlocking();  // the spill writes to disk
        const Status spilled = SpillLocked(victim, what);
        if (spilled.ok()) continue;
        why = "was evicted (least recently used) to free KV cache blocks for another session: " +
              std::string(spilled.code() == StatusCode::kResourceExhausted
                              ? "the spill store is full (--kv-spill-bytes "
                              : "its spill failed (--kv-spill-bytes ") +
              std::to_string(spill_->max_bytes()) + "): " + spilled.message();
      }
      spdlog::info("model {} v{}: evicting session {} ({} blocks) for {}", location_.model,
                   location_.version, victim->info.id, victim->cache->blocks_held(), what);
      EndLocked(victim, why);
      if (metrics_) metrics_->RecordSessionEviction();
    }
    if (changed) PublishLocked();
    if (pool_->free_blocks() >= blocks) return Status::Ok();
    return ResourceExhausted("KV cache full: " + what + " needs " + std::to_string(blocks) +
                             " blocks, " + std::to_string(pool_->free_blocks()) + " of " +
                             std::to_string(pool_->total_blocks()) + " free (" + per_block +
                             "; --kv-cache-bytes, --kv-cache-full-policy " +
                             KvFullPolicyName(options_.full_policy) + ")");
  }

  // A spilled session's blocks back before its step (or fork, or truncate): room is made as for a
  // step (spilling others, never `session` nor a session a step holds), then its bytes come back
  // exactly. No-op for a session that is not spilled.
  Status RestoreLocked(const Ptr& session, const std::string& per_block, CallerThread& caller) {
    if (!session->cache->spilled()) return Status::Ok();
    caller.BeforeBlocking();  // the restore reads from disk
    const int64_t blocks = session->cache->BlocksToRestore();
    MHA_RETURN_IF_ERROR(MakeRoomLocked(blocks, session.get(),
                                       "restoring spilled session '" + session->info.id + "'",
                                       per_block, caller));
    const auto start = std::chrono::steady_clock::now();
    MHA_RETURN_IF_ERROR(session->cache->Restore());
    --spilled_sessions_;
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (metrics_) metrics_->RecordSessionRestore(took.count());
    PublishLocked();
    return Status::Ok();
  }

  // Session `id` for a fork or a truncate (`what`): NOT_FOUND (the directory's reason) when it is
  // not open here, FAILED_PRECONDITION while a step of it is queued or running.
  StatusOr<Ptr> IdleSessionLocked(const std::string& id, const std::string& what) const {
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return directory_->NotFoundFor(id);
    if (it->second->steps.held()) {
      return FailedPrecondition("session '" + Abbreviate(id) +
                                "' has a step queued or running: " + what + " after its answer");
    }
    return it->second;
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
    metrics_->SetSessionBranching({pool_->shared_blocks(), pool_->copies_on_write(),
                                   spilled_sessions_, spill_ ? spill_->bytes_held() : 0});
  }

  int64_t spilled_sessions() const { return spilled_sessions_; }

 private:
  // The least recently used session no step holds that holds blocks (never `keep`), or null.
  Ptr LeastRecentlyUsedIdleLocked(const Session* keep) const {
    Ptr victim;
    for (const auto& [id, s] : sessions_) {
      if (s.get() == keep || s->steps.held() || s->cache->blocks_held() == 0) continue;
      if (!victim || s->last_used < victim->last_used) victim = s;
    }
    return victim;
  }

  // Moves `victim`'s tokens into the spill store (its blocks go back); the store's refusal else.
  Status SpillLocked(const Ptr& victim, const std::string& what) {
    const int64_t blocks = victim->cache->blocks_held();
    const std::string key = victim->info.id + "#" + std::to_string(next_spill_++);
    MHA_RETURN_IF_ERROR(victim->cache->Spill(spill_, key));
    ++spilled_sessions_;
    if (metrics_) metrics_->RecordSessionSpill();
    spdlog::debug("model {} v{}: spilled session {} ({} blocks, {} bytes) for {}", location_.model,
                  location_.version, victim->info.id, blocks, victim->cache->spilled_bytes(), what);
    return Status::Ok();
  }

  const SessionOptions options_;
  const SessionLocation location_;
  const std::shared_ptr<SessionDirectory> directory_;
  StatsAggregator* const metrics_;
  const StepGate gate_;
  std::shared_ptr<KvBlockPool> pool_;    // made on the first EnsurePoolLocked
  std::shared_ptr<KvSpillStore> spill_;  // under the spill policy, made with the pool
  Map sessions_;
  std::function<void(const Session&)> on_removed_;
  int64_t spilled_sessions_ = 0;  // of sessions_
  int64_t next_spill_ = 0;        // spill keys: id#n
};

}  // namespace mha::serve
