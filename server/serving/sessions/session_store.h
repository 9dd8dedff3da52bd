// The decoding sessions of one model version (docs/sessions.md): their KV caches in one paged
// block pool (mha/kv_cache.h), their lifetimes (open, close, idle expiry, LRU eviction) and the
// order of their steps. Owned by the version's ModelHandle: when the version is unloaded or
// replaced, its sessions end with it and their memory goes back.
//
// Steps of one session run one at a time, in arrival order (the session table's StepGate): a step
// that arrives while another of the same session is in flight waits behind it (up to
// max_pending_steps, then RESOURCE_EXHAUSTED). When its turn comes a step is checked against the
// cache (mask shapes cover the cache after it), against max_tokens (OUT_OF_RANGE) and given the
// blocks it needs (RESOURCE_EXHAUSTED when the pool is short, or idle sessions evicted least
// recently used first under the evict-lru policy), then handed to the model's scheduler, which
// merges steps of many sessions into one pass.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mha/engine.h"
#include "mha/host_tensor.h"
#include "mha/kv_cache.h"
#include "server/serving/inference.h"
#include "server/serving/scheduling/runner.h"
#include "server/serving/serving_defaults.h"
#include "server/serving/sessions/session_directory.h"
#include "server/serving/sessions/session_options.h"
#include "server/serving/sessions/session_table.h"

namespace mha::serve {

class StatsAggregator;

struct OpenSessionParams {
  int64_t batch_size = 1;  // rows decoded together
  int64_t max_tokens = 0;  // tokens per row the session may decode (validated by the caller)
  HostTensor key, value;   // both: a cross-attention session over these encoder states
  std::string id{};        // checked by the caller; "" = NewSessionId()
};

// OpenSession's answer for `info`, a session opened on model `model` version `version` (every
// kind's store answers in SessionInfo).
OpenSessionResponse OpenedSession(const SessionInfo& info, const std::string& model,
                                  const std::string& version);
// CloseSession's answer: the closed session's tokens and blocks, or why it could not be closed.
StatusOr<CloseSessionResponse> ClosedSession(const StatusOr<SessionInfo>& info);
// ForkSession's answer for the fork `info` on `model` version `version`, or why it failed.
StatusOr<ForkSessionResponse> ForkedSession(const StatusOr<SessionInfo>& info,
                                            const std::string& model, const std::string& version);
// TruncateSession's answer: what the session holds now, or why it could not be truncated.
StatusOr<TruncateSessionResponse> TruncatedSession(const StatusOr<SessionInfo>& info);

class SessionStore {
 public:
  // `runner` (the version's scheduler) and `metrics` (may be null) outlive the store.
  SessionStore(SessionOptions options, std::shared_ptr<const MhaModel> model,
               SessionLocation location, std::shared_ptr<SessionDirectory> directory,
               ModelRunner* runner, StatsAggregator* metrics);
  ~SessionStore();  // ends every session: "its model version was unloaded"
  SessionStore(const SessionStore&) = delete;
  SessionStore& operator=(const SessionStore&) = delete;

  // Opens a session; a cross-attention one projects its key/value now (on the calling thread).
  StatusOr<SessionInfo> Open(const OpenSessionParams& params);
  // Ends the session; its blocks go back now (after its step in flight, if one is). Steps
  // waiting behind get NOT_FOUND.
  StatusOr<SessionInfo> Close(const std::string& id);
  // Runs `task` (a request's new tokens and masks, validated by ServerCore against nothing but
  // its limits) as the session's next step; `done` as ModelRunner::Submit's, with
  // session_tokens set.
  void Step(const std::string& id, InferenceTask task, DoneCallback done);
  // A new session (id `new_id`, checked by the caller; "" = NewSessionId()) holding the first
  // `tokens` tokens of session `id` (0 = all), sharing its blocks (session_store_branch.cc).
  // NOT_FOUND, FAILED_PRECONDITION while a step holds it, INVALID_ARGUMENT / OUT_OF_RANGE for
  // tokens (SessionTable, CheckBranchTokens); a cross-attention session forks whole only.
  StatusOr<SessionInfo> Fork(const std::string& id, int64_t tokens, const std::string& new_id);
  // Keeps the first `tokens` tokens of session `id`, giving whole blocks back. Refusals as Fork's;
  // a cross-attention session: FAILED_PRECONDITION (its cache holds the encoder's keys).
  StatusOr<SessionInfo> Truncate(const std::string& id, int64_t tokens);
  // Ends the sessions idle longer than the timeout (also done by every call above).
  void SweepExpired();

  using Usage = SessionUsage;
  Usage usage() const;

 private:
  struct Session {
    SessionInfo info;
    std::unique_ptr<KvCache> cache;
    Clock::time_point last_used;
    bool ended = false;
    StepLine steps;  // the steps holding it (SessionTable's gate)
  };
  using SessionPtr = std::shared_ptr<Session>;
  // A step from arrival to answer: its turn at the gate starts it (Begin).
  struct PendingStep {
    InferenceTask task;
    DoneCallback done;
    SessionPtr session;
  };
  using StepPtr = std::shared_ptr<PendingStep>;

  Status EnsurePoolLocked();
  std::string PerBlockLocked() const;  // what a block holds, for the pool-full refusals
  Status MakeRoomLocked(int64_t blocks, const Session* keep, const std::string& what);
  Status AdmitLocked(const SessionPtr& session, InferenceTask* task);
  // Its turn came: admits the step and hands it to the scheduler, or answers its refusal.
  void Begin(const StepPtr& step, const StepTurnPtr& turn);
  void OnStepDone(const StepPtr& step, const StepTurnPtr& turn, int64_t tokens,
                  InferenceResult result);
  // The step leaves the gate; the next turns start.
  void Leave(const StepPtr& step, const StepTurnPtr& turn);
  static void Answer(const StepPtr& step, Status status);

  const SessionOptions options_;
  const std::shared_ptr<const MhaModel> model_;
  const ModelInfo info_;
  const SessionLocation location_;
  const std::shared_ptr<SessionDirectory> directory_;
  ModelRunner* const runner_;
  StatsAggregator* const metrics_;

  mutable std::mutex mu_;
  SessionTable<Session> table_;  // guarded by mu_
};

}  // namespace mha::serve
