// The decoding sessions of one Llama-family version (docs/afd.md): a SessionStore
// (sessions/session_store.h: lifetimes, pool, fork, truncate, spill, the step gate) whose caches
// hold one KV cache per layer (mha/llama_session_cache.h), every layer of every session drawing
// blocks from one pool of the version (--kv-cache-bytes, blocks of --kv-block-tokens tokens of one
// layer: K/V heads only). Ids are server-wide (SessionDirectory), as every kind's are.
//
// A step message holds its sessions through the gate from Acquire to its answer (Finish): it goes
// to the layer-step scheduler when it is first in the line of every session it names, so a
// session's cache is stepped by one message at a time, in arrival order. Before its pass each
// entry is prepared (PrepareLayer: the layer-order rule, max_tokens, room in the pool).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mha/llama_engine.h"
#include "server/serving/inference.h"
#include "server/serving/kinds/llama/llama_cache_layers.h"
#include "server/serving/limits.h"
#include "server/serving/sessions/session_store.h"

namespace mha::serve {

class StatsAggregator;

class LlamaSessions final : public SessionStore<LlamaSessionCache> {
 public:
  // `stack` and `info` are the version's; `metrics` may be null. options.pool sizes the pool
  // (made at the first Open).
  LlamaSessions(SessionOptions options, RequestLimits limits,
                std::shared_ptr<const LlamaAttentionStack> stack, LlamaModelInfo info,
                SessionLocation location, std::shared_ptr<SessionDirectory> directory,
                StatsAggregator* metrics);

  // One sequence (batch_size 0 or 1), no key/value; max_tokens = min(requested or
  // --max-sequence-length, the model's max positions). It takes the blocks of its first token in
  // every layer now, so a full pool refuses the session (RESOURCE_EXHAUSTED) rather than its
  // first step.
  StatusOr<SessionInfo> Open(const OpenSessionRequest& request, CallerThread& caller) override;
  // Before a held session's step: NOT_FOUND when it ended while the step waited, then the
  // layer-order rule and room for `tokens` more tokens in `layer` (LlamaSessionCache::Prepare);
  // idle sessions are evicted or spilled to make room under those policies.
  Status PrepareLayer(const Ptr& session, int64_t layer, int64_t tokens, CallerThread& caller);
  // A message is done with its sessions (answered or refused): what they hold is updated, the
  // messages waiting behind it may start.
  void FinishMessage(const Hold& hold);

 protected:
  int64_t CacheLayers() const override { return info_.num_layers; }
  StatusOr<std::unique_ptr<LlamaSessionCache>> EmptyCacheLocked(
      const SessionRecord& record) override;

 private:
  const RequestLimits limits_;
  const std::shared_ptr<const LlamaAttentionStack> stack_;
  const LlamaModelInfo info_;
};

}  // namespace mha::serve
