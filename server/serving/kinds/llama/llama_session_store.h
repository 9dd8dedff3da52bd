// The decoding sessions of one Llama-family model version (docs/afd.md): each holds one KV cache
// per layer (mha/llama_session_cache.h), every layer of every session drawing blocks from one pool
// of the version (--kv-cache-bytes, blocks of --kv-block-tokens tokens of one layer: K/V heads
// only), their lifetimes (open, close, idle expiry, LRU eviction under --kv-cache-full-policy
// evict-lru) and the steps that hold them. Ids are server-wide (SessionDirectory), as the
// one-layer models' sessions (sessions/session_store.h) are. Owned by the version's handle: the
// sessions end with it.
//
// A step message holds its sessions from submission (Acquire) to its answer (Finish): a held
// session is never evicted or expired, and Close while a step waits ends it at once (the step is
// refused NOT_FOUND when its turn comes) but gives its blocks back only after the last holder.
// The layer-step scheduler runs one pass per session at a time, so a session's cache is touched by
// one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mha/llama_engine.h"
#include "server/serving/sessions/session_directory.h"
#include "server/serving/sessions/session_store.h"
#include "server/serving/sessions/session_table.h"

namespace mha::serve {

class StatsAggregator;

// One open session of a stack.
struct LlamaSession {
  SessionInfo info;  // id, max_tokens; tokens = layer 0's length after its last step
  std::unique_ptr<LlamaSessionCache> cache;
  Clock::time_point last_used;
  int64_t holders = 0;  // step messages that hold it (waiting or running); guarded by the store
  bool ended = false;
  bool held() const { return holders > 0; }  // SessionTable's "a step holds it"
};
using LlamaSessionRef = std::shared_ptr<LlamaSession>;

class LlamaSessionStore {
 public:
  // `stack` is the version's; `metrics` may be null. options.pool sizes the pool (made at the
  // first Open), options.max_pending_steps bounds the messages holding one session.
  LlamaSessionStore(SessionOptions options, std::shared_ptr<const LlamaAttentionStack> stack,
                    LlamaModelInfo info, SessionLocation location,
                    std::shared_ptr<SessionDirectory> directory, StatsAggregator* metrics);
  ~LlamaSessionStore();  // ends every session: "its model version was unloaded"
  LlamaSessionStore(const LlamaSessionStore&) = delete;
  LlamaSessionStore& operator=(const LlamaSessionStore&) = delete;

  // A session of `max_tokens` tokens per layer (checked by the caller) under `id` ("" = a new
  // one). It takes the blocks of its first token in every layer now, so a full pool refuses the
  // session (RESOURCE_EXHAUSTED) rather than its first step.
  StatusOr<SessionInfo> Open(int64_t max_tokens, const std::string& id);
  // Ends the session; its blocks go back now, or after the step messages that hold it.
  StatusOr<SessionInfo> Close(const std::string& id);
  // Holds the sessions `ids` (distinct, checked by the caller) for one step message, all or
  // none: NOT_FOUND "entries[i].session_id: session '...' <why>" for one that is not open here,
  // RESOURCE_EXHAUSTED when one is already held by max_pending_steps messages.
  StatusOr<std::vector<LlamaSessionRef>> Acquire(const std::vector<std::string>& ids);
  // Before a held session's step: NOT_FOUND when it ended while the step waited, then room for
  // `tokens` more tokens in `layer` and the layer-order rule (LlamaSessionCache::Prepare); under
  // evict-lru, idle sessions are ended to make room.
  Status Prepare(const LlamaSessionRef& session, int64_t layer, int64_t tokens);
  // A message is done with its sessions (answered or refused): they are used now, and the blocks
  // of those that ended meanwhile go back once nothing holds them.
  void Finish(const std::vector<LlamaSessionRef>& sessions);
  // Ends the sessions idle longer than the timeout (also done by Open, Close and Acquire).
  void SweepExpired();

  SessionStore::Usage usage() const;
  int64_t block_tokens() const { return options_.pool.block_tokens; }

 private:
  Status EnsurePoolLocked();
  Status MakeRoomLocked(int64_t blocks, const std::string& what);

  const SessionOptions options_;
  const std::shared_ptr<const LlamaAttentionStack> stack_;
  const LlamaModelInfo info_;
  const SessionLocation location_;
  const std::shared_ptr<SessionDirectory> directory_;
  StatsAggregator* const metrics_;

  mutable std::mutex mu_;
  SessionTable<LlamaSession> table_;  // guarded by mu_
};

}  // namespace mha::serve
