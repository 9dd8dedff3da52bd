// SessionKv<Session>: a version's sessions in the shared KV tier (kv_tier.h), for the version's
// SessionStore, whatever its kind's cache (cache_layers.h). It keeps each session's durable state
// (SessionDurability: its lease, the keys of its blocks) and turns the store's events into writes:
//   Claim / Attach   a new session (Open, Fork) takes the lease claimed for its id;
//   AfterStep        with write-behind, each block a step filled is copied out and queued;
//   Fork / Truncate  a fork names its source's blocks (stored once); a truncate drops blocks;
//   Remove           a session closed, expired or evicted leaves the store (queued);
//   Release          a handover or a drain: every unwritten block (a partial last one too) written
//                    now, the record marked released, the lease given up;
//   Fetch / Import   a session taken over from the store: its blocks read and put back exactly.
// Every *Locked function runs under the store's lock; a step never waits on Redis here (its writes
// are queued), only Release and Fetch talk to it on the caller's thread.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mha/kv_export.h"
#include "mha/text.h"
#include "server/serving/sessions/cache_layers.h"
#include "server/serving/sessions/kv_tier.h"
#include "server/serving/sessions/session_directory.h"
#include "server/serving/sessions/sessions.h"

namespace mha::serve {

// One write of a session: its new blocks, then its record (fenced by the lease).
struct SessionWrite {
  SessionLease lease;
  SessionRecord record;
  std::vector<std::pair<std::string, std::string>> blocks;  // key, bytes
  std::vector<std::string> dropped;                         // keys the record names no more
  int64_t bytes() const;
  bool empty() const { return blocks.empty() && dropped.empty(); }
};
Status RunSessionWrite(RedisKvStore& store, const SessionWrite& write);
// Queues `write` (write-behind); a refusal or a failure sets `failed` (CatchUp writes again).
void QueueSessionWrite(KvTier& tier, SessionWrite write, std::shared_ptr<std::atomic<bool>> failed);
// The blocks of `record`, read in one round trip: per layer, per block, its bytes.
StatusOr<std::vector<std::vector<std::string>>> FetchSessionBlocks(RedisKvStore& store,
                                                                   const SessionRecord& record);

template <typename Session>
class SessionKv {
 public:
  SessionKv(std::shared_ptr<KvTier> tier, SessionLocation location, std::string kind)
      : tier_(std::move(tier)), location_(std::move(location)), kind_(std::move(kind)) {}

  bool on() const { return tier_ != nullptr; }
  KvTier& tier() const { return *tier_; }

  // Before Open / Fork registers `id` (no lock held): its lease (Attach takes it). The tier's
  // refusal (ALREADY_EXISTS when a live replica holds it); OK without a lease when unreachable.
  Status Claim(const std::string& id) {
    auto lease = tier_->Claim(id);
    if (!lease.ok()) return lease.status();
    std::lock_guard<std::mutex> lock(claims_mu_);
    claims_[id] = *lease;
    return Status::Ok();
  }
  // The Open or Fork failed: the claim's lease goes back.
  void Unclaim(const std::string& id) {
    std::optional<SessionLease> lease = TakeClaim(id);
    if (lease) (void)tier_->leases().Release(*lease);
  }
  // A session just registered under its id takes the lease claimed for it (if any).
  void AttachLocked(Session& s, int64_t block_tokens) {
    std::optional<SessionLease> lease = TakeClaim(s.info.id);
    s.durable.leased = lease.has_value();
    if (lease) s.durable.lease = *lease;
    s.durable.block_tokens = block_tokens;
    const size_t layers = static_cast<size_t>(CacheLayerCount(*s.cache));
    s.durable.blocks.assign(layers, {});
    s.durable.tokens.assign(layers, 0);
    if (!lease) {
      s.durable.failed->store(true);
      return;
    }
    // Its record, with no block yet: another replica that gets a call for it finds its model and
    // asks this one to release it.
    QueueSessionWrite(*tier_, SessionWrite{*lease, RecordLocked(s, false), {}, {}},
                      s.durable.failed);
  }
  // `fork` (attached) shares the full blocks its source wrote for its first `keep` tokens.
  void ForkLocked(const Session& source, Session& fork, int64_t keep) {
    const int64_t bt = source.durable.block_tokens;
    for (size_t l = 0; l < fork.durable.blocks.size() && l < source.durable.blocks.size(); ++l) {
      const int64_t full = std::min(keep, source.durable.tokens[l]) / bt;
      const auto& from = source.durable.blocks[l];
      fork.durable.blocks[l].assign(from.begin(), from.begin() + full);
      fork.durable.tokens[l] = full * bt;
    }
    if (fork.durable.leased) {  // names the shared blocks: stored once
      SessionWrite w{fork.durable.lease, RecordLocked(fork, false), {}, {}};
      QueueSessionWrite(*tier_, std::move(w), fork.durable.failed);
    }
  }
  // `s` now holds its first `tokens` tokens: the blocks that held later ones leave its record.
  void TruncateLocked(Session& s, int64_t tokens) {
    SessionWrite w;
    const size_t keep = static_cast<size_t>(tokens / s.durable.block_tokens);
    for (size_t l = 0; l < s.durable.blocks.size(); ++l) {
      auto& blocks = s.durable.blocks[l];
      if (blocks.size() <= keep) continue;
      w.dropped.insert(w.dropped.end(), blocks.begin() + keep, blocks.end());
      blocks.resize(keep);
      s.durable.tokens[l] = std::min<int64_t>(s.durable.tokens[l], keep * s.durable.block_tokens);
    }
    s.durable.resync_tokens = -1;
    if (w.dropped.empty() || !s.durable.leased) return;
    w.lease = s.durable.lease;
    w.record = RecordLocked(s, false);
    QueueSessionWrite(*tier_, std::move(w), s.durable.failed);
  }
  // After a step: with write-behind, the blocks it filled are copied out and queued.
  void AfterStepLocked(Session& s) {
    if (!tier_->write_behind() || !s.durable.leased || s.cache->spilled()) return;
    SessionWrite w;
    ExportLocked(s, false, &w);
    if (w.empty()) return;
    w.lease = s.durable.lease;
    w.record = RecordLocked(s, false);
    QueueSessionWrite(*tier_, std::move(w), s.durable.failed);
  }
  // `s` ended here for good (closed, expired, evicted): it leaves the store.
  void RemoveLocked(const Session& s) {
    if (!s.durable.leased) return;
    KvWriteJob job;
    job.session = s.info.id;
    std::vector<std::string> keys;
    for (const auto& layer : s.durable.blocks) keys.insert(keys.end(), layer.begin(), layer.end());
    job.run = [tier = tier_.get(), lease = s.durable.lease, keys] {
      return tier->store().RemoveSession(lease, keys);
    };
    (void)tier_->queue().Push(std::move(job));
  }
  // Everything `s` holds written now (partial blocks too), the record marked released, the lease
  // given up: another replica may restore it exactly. The store's refusal otherwise (nothing
  // released).
  Status ReleaseLocked(Session& s) {
    if (!s.durable.leased) MHA_RETURN_IF_ERROR(LeaseNowLocked(s));
    // Writes queued before go first: a late one would overwrite the released record.
    const auto bound = std::chrono::milliseconds(tier_->options().handover_timeout_ms);
    tier_->queue().Flush(std::chrono::steady_clock::now() + bound);
    if (s.durable.failed->exchange(false)) ResetLocked(s, nullptr);
    SessionWrite w;
    ExportLocked(s, true, &w);
    w.lease = s.durable.lease;
    w.record = RecordLocked(s, true);
    MHA_RETURN_IF_ERROR(RunSessionWrite(tier_->store(), w));
    MHA_RETURN_IF_ERROR(tier_->leases().Release(s.durable.lease));
    s.durable.leased = false;
    tier_->RecordRelease();
    return Status::Ok();
  }
  // CatchUp of one session (the store answers again): a lease when it has none, then, when a
  // write failed, every full block written again under new keys. Whether it is durable now.
  bool CatchUpLocked(Session& s) {
    if (!s.durable.leased && !LeaseNowLocked(s).ok()) return false;
    if (!s.durable.failed->exchange(false)) return true;
    SessionWrite w;
    ResetLocked(s, &w.dropped);
    ExportLocked(s, false, &w);
    w.lease = s.durable.lease;
    w.record = RecordLocked(s, false);
    QueueSessionWrite(*tier_, std::move(w), s.durable.failed);
    return true;
  }

  // The record of `s` as it stands (its durable blocks).
  SessionRecord RecordLocked(const Session& s, bool released) const {
    SessionRecord r;
    r.session_id = s.info.id;
    r.model = location_.model;
    r.version = location_.version;
    r.fingerprint = location_.fingerprint;
    r.kind = kind_;
    const KvBlockPool& pool = CacheLayer(*s.cache, 0).pool();
    r.dtype = KvDtypeName(pool);
    r.rows = CacheLayer(*s.cache, 0).rows();
    r.heads = pool.heads();
    r.head_dim = pool.head_dim();
    r.dtype_bytes = KvElementBytes(pool);
    r.block_tokens = s.durable.block_tokens;
    r.max_tokens = s.info.max_tokens;
    r.cross = s.info.cross;
    r.tokens = s.info.tokens;
    r.released = released;
    for (size_t l = 0; l < s.durable.blocks.size(); ++l) {
      r.layers.push_back({s.durable.tokens[l], s.durable.blocks[l]});
    }
    return r;
  }
  SessionRecordExpect Expect(const KvBlockPool& pool, int64_t layers) const {
    return {location_.model, location_.fingerprint, kind_, KvDtypeName(pool),
            pool.heads(),    pool.head_dim(),       layers};
  }

  // A session restored from `record` (its blocks `data`, FetchSessionBlocks): every layer's
  // tokens put back exactly (layer l at most layer l - 1's), its durable state the record's, and
  // when the record was not released (its replica was lost), the first step refused saying how
  // many tokens it holds.
  Status ImportLocked(Session& s, const SessionRecord& record,
                      const std::vector<std::vector<std::string>>& data,
                      const SessionLease& lease) {
    s.durable.leased = true;
    s.durable.lease = lease;
    s.durable.block_tokens = record.block_tokens;
    int64_t before = INT64_MAX;
    for (size_t l = 0; l < record.layers.size(); ++l) {
      KvCache* cache = MutableCacheLayer(*s.cache, static_cast<int64_t>(l));
      int64_t put = 0;
      size_t j = 0;
      for (; j < data[l].size(); ++j) {
        const int64_t n = record.BlockBytes(l, j) / (record.rows * record.bytes_per_token());
        if (put + n > before) break;  // never more than the layer before holds
        MHA_RETURN_IF_ERROR(ImportKvTokens(cache, data[l][j].data(), n));
        put += n;
      }
      const auto& keys = record.layers[l].blocks;
      s.durable.blocks.emplace_back(keys.begin(), keys.begin() + static_cast<int64_t>(j));
      s.durable.tokens.push_back(put);
      before = put;
    }
    return Status::Ok();
  }

 private:
  std::optional<SessionLease> TakeClaim(const std::string& id) {
    std::lock_guard<std::mutex> lock(claims_mu_);
    auto it = claims_.find(id);
    if (it == claims_.end()) return std::nullopt;
    std::optional<SessionLease> lease = it->second;
    claims_.erase(it);
    return lease;
  }
  Status LeaseNowLocked(Session& s) {
    auto attempt = tier_->leases().TryAcquire(s.info.id);
    if (!attempt.ok()) return attempt.status();
    if (!attempt->acquired) {
      return Aborted("session '" + Abbreviate(s.info.id) + "' is held by replica '" +
                     attempt->holder + "'");
    }
    s.durable.leased = true;
    s.durable.lease = attempt->lease;
    return Status::Ok();
  }
  // Forgets what `s` wrote (its keys into `dropped` when given): written again from scratch.
  void ResetLocked(Session& s, std::vector<std::string>* dropped) {
    for (size_t l = 0; l < s.durable.blocks.size(); ++l) {
      if (dropped)
        dropped->insert(dropped->end(), s.durable.blocks[l].begin(), s.durable.blocks[l].end());
      s.durable.blocks[l].clear();
      s.durable.tokens[l] = 0;
    }
  }
  // Each layer's blocks not written yet (the full ones; with `partial`, the last one too) copied
  // into `w` under new keys; the durable state names them.
  void ExportLocked(Session& s, bool partial, SessionWrite* w) {
    const int64_t bt = s.durable.block_tokens;
    for (size_t l = 0; l < s.durable.blocks.size(); ++l) {
      const KvCache& cache = CacheLayer(*s.cache, static_cast<int64_t>(l));
      const int64_t length = cache.length(), first = s.durable.tokens[l] / bt;
      const int64_t full = length / bt;
      for (int64_t j = first; j < full; ++j) PutLocked(s, l, j, bt, w);
      if (full > first) s.durable.tokens[l] = full * bt;
      if (partial && length % bt != 0 && s.durable.tokens[l] < length) {
        PutLocked(s, l, full, length % bt, w);
        s.durable.tokens[l] = length;
      }
    }
  }
  // Block `j` of layer `l` (`n` tokens) copied out under a new key in place of any it replaces.
  void PutLocked(Session& s, size_t l, int64_t j, int64_t n, SessionWrite* w) {
    const KvCache& cache = CacheLayer(*s.cache, static_cast<int64_t>(l));
    std::string bytes(static_cast<size_t>(cache.rows() * n * cache.pool().bytes_per_token()), '\0');
    const Status exported = ExportKvTokens(cache, j * s.durable.block_tokens, n, bytes.data());
    if (!exported.ok()) {
      s.durable.failed->store(true);
      return;
    }
    std::string key = tier_->store().NewBlockKey(s.info.id, s.durable.lease.token);
    auto& blocks = s.durable.blocks[l];
    const size_t at = static_cast<size_t>(j);
    if (at < blocks.size()) {
      w->dropped.push_back(blocks[at]);
      blocks[at] = key;
    } else {
      blocks.push_back(key);
    }
    w->blocks.emplace_back(std::move(key), std::move(bytes));
  }

  const std::shared_ptr<KvTier> tier_;
  const SessionLocation location_;
  const std::string kind_;
  std::mutex claims_mu_;
  std::map<std::string, std::optional<SessionLease>> claims_;  // guarded by claims_mu_
};

}  // namespace mha::serve
