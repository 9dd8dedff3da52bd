// The decoding sessions of one model version (docs/sessions.md): their KV caches in one paged
// block pool (mha/kv_cache.h), their lifetimes (open, close, idle expiry, LRU eviction) and the
// order of their steps. Owned by the version's ModelHandle: when the version is unloaded or
// replaced, its sessions end with it and their memory goes back.
//
// Steps of one session run one at a time, in arrival order: a step that arrives while another of
// the same session is in flight waits behind it (up to max_pending_steps, then
// RESOURCE_EXHAUSTED). When its turn comes a step is checked against the cache (mask shapes
// cover the cache after it), against max_tokens (OUT_OF_RANGE) and given the blocks it needs
// (RESOURCE_EXHAUSTED when the pool is short, or idle sessions evicted least recently used
// first under the evict-lru policy), then handed to the model's scheduler, which merges steps
// of many sessions into one pass.
#pragma once

#include <cstdint>
#include <deque>
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

namespace mha::serve {

class StatsAggregator;

enum class KvFullPolicy {
  kRefuse,    // new sessions and steps that need blocks get RESOURCE_EXHAUSTED
  kEvictLru,  // idle sessions are evicted, least recently used first, until the blocks fit
};
// "refuse" / "evict-lru".
StatusOr<KvFullPolicy> ParseKvFullPolicy(const std::string& name);
const char* KvFullPolicyName(KvFullPolicy policy);

struct SessionOptions {
  KvPoolOptions pool;            // per model version: --kv-cache-bytes, --kv-block-tokens
  int64_t idle_timeout_s = 600;  // --session-idle-timeout-s: idle longer ends it; 0 = never
  const ClockSource* clock = &RealClock();           // idle time is read here (tests: a FakeClock)
  KvFullPolicy full_policy = KvFullPolicy::kRefuse;  // --kv-cache-full-policy
  size_t max_pending_steps = 16;  // steps of one session waiting behind the one in flight
  // A step's estimated working memory and response (server/serving/budget.h), as for any request:
  // --max-work-bytes and --max-response-bytes (ServerCore fills them from its limits).
  int64_t max_work_bytes = kDefaultMaxWorkBytes;
  int64_t max_response_bytes = kDefaultMaxResponseBytes;
};

struct OpenSessionParams {
  int64_t batch_size = 1;  // rows decoded together
  int64_t max_tokens = 0;  // tokens per row the session may decode (validated by the caller)
  HostTensor key, value;   // both: a cross-attention session over these encoder states
  std::string id{};        // checked by the caller; "" = NewSessionId()
};

struct SessionInfo {
  std::string id;
  bool cross = false;
  int64_t batch_size = 0, max_tokens = 0;
  int64_t tokens = 0;  // decoded per row so far
  int64_t blocks = 0;  // KV blocks held
  int64_t block_tokens = 0;
};

// OpenSession's answer for `info`, a session opened on model `model` version `version` (every
// kind's store answers in SessionInfo).
OpenSessionResponse OpenedSession(const SessionInfo& info, const std::string& model,
                                  const std::string& version);
// CloseSession's answer: the closed session's tokens and blocks, or why it could not be closed.
StatusOr<CloseSessionResponse> ClosedSession(const StatusOr<SessionInfo>& info);

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
  // Ends the sessions idle longer than the timeout (also done by every call above).
  void SweepExpired();

  struct Usage {
    int64_t sessions = 0, blocks_used = 0, blocks_total = 0, block_bytes = 0;
  };
  Usage usage() const;

 private:
  struct Pending {
    InferenceTask task;
    DoneCallback done;
  };
  struct Session {
    SessionInfo info;
    std::unique_ptr<KvCache> cache;
    Clock::time_point last_used;
    bool busy = false;  // a step is in the scheduler
    bool ended = false;
    std::deque<Pending> pending;
  };
  using SessionPtr = std::shared_ptr<Session>;
  // A step ready for the scheduler, or a step answered at once.
  struct Action {
    Pending pending;
    Status status;  // not OK: answer with it; OK: submit
    SessionPtr session;
  };

  Status EnsurePoolLocked();
  void EndLocked(const SessionPtr& session, const std::string& why);
  void SweepLocked(Clock::time_point now);
  Status MakeRoomLocked(int64_t blocks, const Session* keep, const std::string& what);
  Status AdmitLocked(const SessionPtr& session, InferenceTask* task);
  // With mu_ held: the session's next waiting step, admitted or refused (the session stays
  // busy); false when none waits (the session is idle again).
  bool NextLocked(const SessionPtr& session, Action* action);
  void IdleLocked(Session* session);
  void Run(Action action);
  void OnStepDone(const SessionPtr& session, int64_t tokens, InferenceResult result,
                  const DoneCallback& done);
  void PublishLocked() const;

  const SessionOptions options_;
  const std::shared_ptr<const MhaModel> model_;
  const ModelInfo info_;
  const SessionLocation location_;
  const std::shared_ptr<SessionDirectory> directory_;
  ModelRunner* const runner_;
  StatsAggregator* const metrics_;

  mutable std::mutex mu_;
  std::shared_ptr<KvBlockPool> pool_;  // made on the first Open
  std::map<std::string, SessionPtr> sessions_;
};

}  // namespace mha::serve
