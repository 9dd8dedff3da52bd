// The decoding sessions of one one-layer (nn.MultiheadAttention) version (docs/sessions.md): a
// SessionStore (sessions/session_store.h: lifetimes, pool, fork, truncate, spill, the step gate)
// whose caches are KvCaches, one per session (all its rows), and whose steps go to the version's
// scheduler, which merges steps of many sessions into one pass.
//
// Open: self-attention sessions take a block per row for their first tokens at once (so that an
// admitted session can step); cross-attention sessions project their key/value once (on the
// calling thread) into the blocks of the encoder's keys. A step, when its turn comes: checked
// against the cache (mask shapes cover the cache after it), its estimated cost (--max-work-bytes,
// --max-response-bytes), max_tokens (OUT_OF_RANGE), then given the blocks it needs
// (RESOURCE_EXHAUSTED when the pool is short, idle sessions evicted or spilled under those
// policies) and handed to the scheduler. A cross-attention session forks whole only and is never
// truncated: its cache holds the encoder's keys, not decoded tokens.
#pragma once

#include <memory>
#include <string>

#include "mha/engine.h"
#include "mha/kv_cache.h"
#include "server/serving/inference.h"
#include "server/serving/limits.h"
#include "server/serving/scheduling/runner.h"
#include "server/serving/sessions/session_store.h"

namespace mha::serve {

class StatsAggregator;

class MultiheadSessions final : public SessionStore<KvCache> {
 public:
  // `runner` (the version's scheduler) and `metrics` (may be null) outlive the store.
  MultiheadSessions(SessionOptions options, RequestLimits limits,
                    std::shared_ptr<const MhaModel> model, SessionLocation location,
                    std::shared_ptr<SessionDirectory> directory, ModelRunner* runner,
                    StatsAggregator* metrics);

  // batch_size 0 = 1, max_tokens 0 = --max-sequence-length; both within the limits. With key and
  // value: a cross-attention session over those encoder states (the only kind a model with kdim
  // or vdim != embed_dim has).
  StatusOr<SessionInfo> Open(const OpenSessionRequest& request, CallerThread& caller) override;
  // Runs `task` (a request's new tokens and masks, validated by ServerCore against nothing but its
  // limits) as the session's next step; `done` as ModelRunner::Submit's, with session_tokens set.
  void Step(const std::string& id, InferenceTask task, DoneCallback done);

 protected:
  StatusOr<int64_t> ForkTokens(const Session& source, int64_t keep) const override;
  Status CheckTruncate(const Session& session) const override;
  StatusOr<std::unique_ptr<KvCache>> EmptyCacheLocked(const SessionRecord& record) override;

 private:
  struct PendingStep {
    InferenceTask task;
    DoneCallback done;
  };
  using StepPtr = std::shared_ptr<PendingStep>;

  // Its turn came: prepared (checks, blocks) and handed to the scheduler, or refused.
  void Begin(const StepPtr& step, Hold hold, CallerThread& caller);
  // The kind's checks of a step against its session (before any block is taken).
  Status CheckStep(const Session& s, const HostInputs& in) const;
  static void Answer(const StepPtr& step, Status status);

  const RequestLimits limits_;
  const std::shared_ptr<const MhaModel> model_;
  const ModelInfo info_;
  const int64_t cache_bytes_per_key_;  // a gather's stored bytes per key of a row (budget.h)
  ModelRunner* const runner_;
};

}  // namespace mha::serve
