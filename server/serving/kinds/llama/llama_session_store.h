// The decoding sessions of one Llama-family model version (docs/afd.md): each holds one KV cache
// per layer (mha/llama_session_cache.h), every layer of every session drawing blocks from one pool
// of the version (--kv-cache-bytes, blocks of --kv-block-tokens tokens of one layer: K/V heads
// only), their lifetimes (open, close, idle expiry, LRU eviction under --kv-cache-full-policy
// evict-lru) and the steps that hold them. Ids are server-wide (SessionDirectory), as the
// one-layer models' sessions (sessions/session_store.h) are. Owned by the version's handle: the
// sessions end with it.
//
// A step message holds its sessions through the session table's StepGate from Acquire to its
// answer (Finish): it starts (goes to the layer-step scheduler) when it is first in the line of
// every session it names, so a session's cache is stepped by one message at a time, in arrival
// order. A held session is never evicted or expired; Close ends it at once, refuses the messages
// waiting for it (NOT_FOUND) and gives its blocks back after the message that started.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mha/llama_engine.h"
#include "server/serving/sessions/session_directory.h"
#include "server/serving/sessions/session_store.h"
#include "server/serving/sessions/session_table.h"
#include "server/serving/sessions/step_gate.h"

namespace mha::serve {

class StatsAggregator;

// One open session of a stack.
struct LlamaSession {
  SessionInfo info;  // id, max_tokens; tokens = layer 0's length after its last step
  std::unique_ptr<LlamaSessionCache> cache;
  Clock::time_point last_used;
  bool ended = false;
  StepLine steps;  // the step messages holding it (SessionTable's gate); guarded by the store
};
using LlamaSessionRef = std::shared_ptr<LlamaSession>;

// A message's hold on its sessions (one per entry, in entry order), from its turn to Finish.
struct LlamaStepHold {
  std::vector<LlamaSessionRef> sessions;
  StepTurnPtr turn;
};

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
  // A step message over the sessions `ids` (distinct, checked by the caller) enters the gate, all
  // or none: NOT_FOUND "entries[i].session_id: session '...' <why>" for one that is not open here,
  // RESOURCE_EXHAUSTED when one already has max_pending_steps messages waiting. `start` runs when
  // its turn comes (on this thread before Acquire returns when nothing waits before it); `refuse`
  // instead when a session it waits for is closed first ("entries[i].session_id: ...").
  Status Acquire(const std::vector<std::string>& ids, std::function<void(LlamaStepHold)> start,
                 std::function<void(Status)> refuse);
  // Before a held session's step: NOT_FOUND when it ended while the step waited, then room for
  // `tokens` more tokens in `layer` and the layer-order rule (LlamaSessionCache::Prepare); under
  // evict-lru, idle sessions are ended to make room.
  Status Prepare(const LlamaSessionRef& session, int64_t layer, int64_t tokens);
  // A message is done with its sessions (answered or refused): they are used now, the blocks of
  // those that ended meanwhile go back, and the messages waiting behind it may start.
  void Finish(const LlamaStepHold& hold);
  // A new session (id `new_id`, checked by the caller; "" = NewSessionId()) holding the first
  // `tokens` tokens (0 = all) of session `id`: each layer min(tokens, its length), sharing its
  // blocks (llama_session_store_branch.cc). NOT_FOUND, FAILED_PRECONDITION while a message holds
  // it, INVALID_ARGUMENT / OUT_OF_RANGE for tokens against layer 0's length.
  StatusOr<SessionInfo> Fork(const std::string& id, int64_t tokens, const std::string& new_id);
  // Every layer keeps min(tokens, its length); whole blocks go back. Refusals as Fork's.
  StatusOr<SessionInfo> Truncate(const std::string& id, int64_t tokens);
  // Ends the sessions idle longer than the timeout (also done by Open, Close and Acquire).
  void SweepExpired();

  SessionStore::Usage usage() const;
  int64_t block_tokens() const { return options_.pool.block_tokens; }

 private:
  Status EnsurePoolLocked();
  std::string PerBlockLocked() const;  // what a block holds, for the pool-full refusals
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
