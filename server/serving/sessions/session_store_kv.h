// SessionStore<Cache>'s part in the shared KV tier (kv_tier.h, session_kv.h): the claims of new
// ids, the restore of a session another replica held (Adopt), its release on a handover request
// or a drain, and the lease upkeep the tier asks for. Included by session_store.h.
#pragma once

#include <spdlog/spdlog.h>

#include <chrono>
#include <thread>

#include "server/serving/sessions/session_store.h"

namespace mha::serve {

template <typename Cache>
Status SessionStore<Cache>::Claim(const std::string& id) {
  return kv_.on() ? kv_.Claim(id) : Status::Ok();
}

template <typename Cache>
void SessionStore<Cache>::Unclaim(const std::string& id) {
  if (kv_.on()) kv_.Unclaim(id);
}

template <typename Cache>
Status SessionStore<Cache>::Adopt(const std::string& id, CallerThread& caller) {
  if (!kv_.on()) return Sessions::Adopt(id, caller);
  KvTier& tier = kv_.tier();
  caller.BeforeBlocking();  // a handover waits on another replica
  const auto start = std::chrono::steady_clock::now();
  // NOT_FOUND: nothing to take over, no lease asked; unless another replica holds its lease: it
  // opened the session and writes its first record after answering (session_kv.h, AttachLocked),
  // so the handover below is what makes it write one.
  auto text = tier.store().ReadRecord(id);
  if (!text.ok()) {
    if (text.status().code() != StatusCode::kNotFound) return text.status();
    auto held = tier.leases().Held(id);
    if (!held.ok() || !*held) return text.status();
  }
  auto lease = tier.leases().Acquire(id);
  if (!lease.ok()) return lease.status();
  auto give_back = [&](const Status& why) {
    (void)tier.leases().Release(*lease);
    return why;
  };
  text = tier.store().ReadRecord(id);  // as its owner left it
  if (!text.ok()) return give_back(text.status());
  SessionRecordExpect expect;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Status pool = EnsurePoolLocked();
    if (!pool.ok()) return give_back(pool);
    expect = kv_.Expect(*table_.pool(), CacheLayers());
  }
  auto record = DecodeSessionRecord(id, *text, expect);
  if (!record.ok()) return give_back(record.status());
  auto data = FetchSessionBlocks(tier.store(), *record);
  if (!data.ok()) return give_back(data.status());
  // Marked taken before anyone steps it: if this replica is lost too, the next one knows that
  // only the written tokens are exact.
  SessionRecord taken = *record;
  taken.released = false;
  const Status marked = tier.store().WriteRecord(*lease, taken, {});
  if (!marked.ok()) return give_back(marked);
  Status adopted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    adopted = AdoptLocked(id, *record, *data, *lease, caller);
  }
  if (!adopted.ok()) {
    (void)tier.store().WriteRecord(*lease, *record, {});  // as it was
    return give_back(adopted);
  }
  int64_t bytes = 0;
  for (const auto& layer : *data) {
    for (const auto& block : layer) bytes += static_cast<int64_t>(block.size());
  }
  const int64_t durable = record->durable_tokens();
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  tier.RecordRestore(durable, record->released ? 0 : std::max<int64_t>(0, record->tokens - durable),
                     bytes, took);
  spdlog::info(
      "model {} v{}: session {} restored from the KV store ({} tokens, {} bytes, {:.1f} "
      "ms{})",
      location_.model, location_.version, id, durable, bytes, took * 1e3,
      record->released ? "" : "; its replica was lost: the client replays the rest");
  return Status::Ok();
}

template <typename Cache>
Status SessionStore<Cache>::AdoptLocked(const std::string& id, const SessionRecord& record,
                                        const std::vector<std::vector<std::string>>& data,
                                        const SessionLease& lease, CallerThread& caller) {
  const Clock::time_point now = options_.clock->Now();
  table_.SweepLocked(now);
  if (table_.sessions().count(id) > 0) return Status::Ok();  // another call restored it meanwhile
  auto session = std::make_shared<Session>();
  session->info.id = id;
  session->info.batch_size = record.rows;
  session->info.max_tokens = record.max_tokens;
  session->info.cross = record.cross;
  session->info.block_tokens = table_.pool()->block_tokens();
  auto cache = EmptyCacheLocked(record);
  if (!cache.ok()) return cache.status();
  session->cache = std::move(cache.value());
  const int64_t bt = table_.pool()->block_tokens();
  int64_t blocks = 0;
  for (const auto& layer : record.layers) blocks += record.rows * ((layer.tokens + bt - 1) / bt);
  MHA_RETURN_IF_ERROR(MakeRoomLocked(blocks, "restoring session '" + id + "'", caller));
  MHA_RETURN_IF_ERROR(kv_.ImportLocked(*session, record, data, lease));
  if (record.cross && !record.released) {
    // Its cache is the encoder's keys, complete only when it was handed over: the client opens it
    // again with them.
    return NotFound("session '" + Abbreviate(id) + "' was lost with its replica (a " +
                    "cross-attention session is restored only when it was handed over)");
  }
  const bool exact = record.released || record.cross;
  session->info.tokens = exact ? record.tokens : CacheLayer(*session->cache, 0).length();
  if (!exact) session->durable.resync_tokens = session->info.tokens;
  session->info.blocks = session->cache->blocks_held();
  session->info.shared_blocks = session->cache->shared_blocks_held();
  session->last_used = now;
  return table_.AddLocked(session);
}

template <typename Cache>
StatusOr<bool> SessionStore<Cache>::ReleaseIdleLocked(const std::string& id,
                                                      const std::string& why) {
  auto it = table_.sessions().find(id);
  if (it == table_.sessions().end()) return Internal("not here");
  const Ptr session = it->second;
  session->durable.leaving = true;  // new steps are refused from now on (they retry elsewhere)
  if (session->steps.held()) return false;
  CallerThread caller;
  MHA_RETURN_IF_ERROR(table_.RestoreLocked(session, PerBlockLocked(), caller));
  const Status released = kv_.ReleaseLocked(*session);
  if (!released.ok()) {
    session->durable.leaving = false;
    return released;
  }
  std::vector<StepGate::Dropped> dropped;
  std::vector<StepTurnPtr> ready;
  table_.CloseLocked(session, why, &dropped, &ready, /*restorable=*/true);
  return true;
}

template <typename Cache>
bool SessionStore<Cache>::ReleaseForHandover(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (table_.sessions().count(id) == 0) return false;
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(kv_.tier().options().handover_timeout_ms);
  for (;;) {
    StatusOr<bool> done = Internal("");
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (table_.sessions().count(id) == 0) return true;  // ended meanwhile
      done = ReleaseIdleLocked(id, "moved to another replica (through the shared KV store)");
    }
    if (!done.ok()) {
      spdlog::warn("KV store: session {} not released: {}", id, done.status().message());
      return true;
    }
    if (*done) return true;
    if (std::chrono::steady_clock::now() > deadline) {
      spdlog::warn("KV store: session {} still stepping after the handover timeout", id);
      return true;
    }
    // The step in flight answers within its pass; new ones are refused meanwhile.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

template <typename Cache>
int64_t SessionStore<Cache>::ReleaseAll(std::chrono::steady_clock::time_point deadline) {
  std::vector<std::string> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, s] : table_.sessions()) {
      s->durable.leaving = true;
      ids.push_back(id);
    }
  }
  int64_t released = 0;
  for (const auto& id : ids) {
    while (std::chrono::steady_clock::now() < deadline) {
      StatusOr<bool> done = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (table_.sessions().count(id) == 0) break;
        done = ReleaseIdleLocked(id, "handed over to the shared KV store (the server stopped)");
      }
      if (!done.ok()) {
        spdlog::warn("KV store: session {} not released: {}", id, done.status().message());
        break;
      }
      if (*done) {
        ++released;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // its step answers first
    }
  }
  return released;
}

template <typename Cache>
std::vector<SessionLease> SessionStore<Cache>::Leases() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SessionLease> leases;
  for (const auto& [id, s] : table_.sessions()) {
    if (s->durable.leased) leases.push_back(s->durable.lease);
  }
  return leases;
}

template <typename Cache>
void SessionStore<Cache>::LeaseLost(const std::string& id) {
  std::vector<StepGate::Dropped> dropped;
  std::vector<StepTurnPtr> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = table_.sessions().find(id);
    if (it == table_.sessions().end()) return;
    spdlog::warn("KV store: session {}'s lease was taken by another replica: it ends here", id);
    it->second->durable.leased = false;
    table_.CloseLocked(it->second, "moved: another replica took its lease in the shared KV store",
                       &dropped, &ready, /*restorable=*/true);
  }
  StepGate::Refuse(dropped, Unavailable("session '" + Abbreviate(id) +
                                        "' moved to another "
                                        "replica (shared KV store): retry"));
  StepGate::Start(ready);
}

template <typename Cache>
int64_t SessionStore<Cache>::CatchUp() {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t not_durable = 0;
  for (const auto& [id, s] : table_.sessions()) {
    if (s->cache->spilled() || s->durable.leaving) continue;
    if (!kv_.CatchUpLocked(*s)) ++not_durable;
  }
  return not_durable;
}

}  // namespace mha::serve
