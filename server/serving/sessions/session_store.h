// SessionStore<Cache>: the decoding sessions of one model version, whatever its kind: the lock,
// the SessionTable (sessions, pool, expiry, eviction, spill), the session calls every kind answers
// the same way (Close, Fork, Truncate, usage) and the one step protocol both kinds' caches plug
// into. A kind derives its store from it (in its folder under kinds/), adds Open and its steps,
// and tells the fork and truncate rules of its cache (ForkTokens, CheckTruncate).
//
// The step protocol, the same for a one-layer step and a stack's layer-step message:
//   Acquire  the step enters the gate of every session it names, all or none (NOT_FOUND for one
//            that is not open here, RESOURCE_EXHAUSTED when one has --max-pending-steps waiting);
//            `start` runs when it is first in each line (at once, on the caller's thread, when
//            nothing waits before it), `refuse` instead when a session it waits for ends first;
//   Prepare  before the step's pass, under the lock: the session still open, the kind's checks,
//            a spilled session restored, room made for the blocks it takes (evicting or spilling
//            idle sessions), the blocks taken;
//   Finish   after the pass (answered or refused): the kind updates what the session holds, the
//            sessions are used now, the step leaves the gate (an ended session's blocks go back
//            once nothing holds it), the answer goes out, the steps waiting behind it start.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "mha/text.h"
#include "server/serving/sessions/session_kv.h"
#include "server/serving/sessions/session_table.h"
#include "server/serving/sessions/sessions.h"
#include "server/serving/sessions/step_gate.h"

namespace mha::serve {

// How a kind's store makes and describes its version's pool.
struct SessionPool {
  std::function<StatusOr<std::shared_ptr<KvBlockPool>>()> make;
  std::function<void(const KvBlockPool&)> describe;          // logs it, once
  std::function<std::string(const KvBlockPool&)> per_block;  // what a block holds, for refusals
  std::string device;                                        // "cpu" spills into files
  std::string kind;  // the kind's registered name, in the shared KV store's records
};

template <typename Cache>
class SessionStore : public Sessions, public DurableSessions {
 public:
  using Session = SessionState<Cache>;
  using Ptr = std::shared_ptr<Session>;
  // A step's hold on its sessions (one per entry, in entry order), from its turn to Finish.
  struct Hold {
    std::vector<Ptr> sessions;
    StepTurnPtr turn;
  };
  // What one session's step takes, checked and reserved by Prepare.
  struct StepPlan {
    std::function<Status(const Session&)> check;    // the kind's checks (before a restore)
    std::function<int64_t(const Session&)> blocks;  // the blocks it takes (after the restore)
    std::string what;                               // names it in a pool-full refusal
    std::function<Status(Session&)> reserve;        // takes them
  };

  ~SessionStore() override {
    if (kv_.on()) kv_.tier().Unregister(this);
    EndAll();
  }
  SessionStore(const SessionStore&) = delete;
  SessionStore& operator=(const SessionStore&) = delete;

  StatusOr<SessionInfo> Close(const std::string& id) override {
    std::vector<StepGate::Dropped> dropped;
    std::vector<StepTurnPtr> ready;
    Status why;
    StatusOr<SessionInfo> info = NotFound("");
    {
      std::lock_guard<std::mutex> lock(mu_);
      table_.SweepLocked(options_.clock->Now());
      auto it = table_.sessions().find(id);
      if (it == table_.sessions().end()) return table_.directory().NotFoundFor(id);
      const Ptr session = it->second;
      SessionInfo closed = session->info;
      closed.blocks = session->cache->blocks_held();
      table_.CloseLocked(session, "was closed (CloseSession)", &dropped, &ready);
      why = table_.EndedWhileWaitingLocked(id);
      info = closed;
    }
    StepGate::Refuse(dropped, why);
    StepGate::Start(ready);
    return info;
  }

  StatusOr<SessionInfo> Fork(const std::string& id, int64_t tokens, const std::string& new_id,
                             CallerThread& caller) override {
    std::lock_guard<std::mutex> lock(mu_);
    const Clock::time_point now = options_.clock->Now();
    table_.SweepLocked(now);
    auto source = table_.IdleSessionLocked(id, "fork");
    if (!source.ok()) return source.status();
    const Ptr& s = *source;
    MHA_RETURN_IF_ERROR(CheckBranchTokens(id, tokens, s->info.tokens));
    const int64_t keep = tokens == 0 ? s->info.tokens : tokens;
    auto cache_tokens = ForkTokens(*s, keep);
    if (!cache_tokens.ok()) return cache_tokens.status();
    MHA_RETURN_IF_ERROR(table_.RestoreLocked(s, PerBlockLocked(), caller));
    auto cache = s->cache->Fork(*cache_tokens);
    if (!cache.ok()) return cache.status();
    auto fork = std::make_shared<Session>();
    fork->info = s->info;
    fork->info.id = new_id.empty() ? NewSessionId() : new_id;
    fork->info.tokens = keep;
    fork->cache = std::move(cache.value());
    fork->info.blocks = fork->cache->blocks_held();
    fork->info.shared_blocks = fork->cache->shared_blocks_held();
    fork->last_used = s->last_used = now;
    MHA_RETURN_IF_ERROR(table_.AddLocked(fork));
    if (kv_.on()) {
      kv_.AttachLocked(*fork, s->durable.block_tokens);
      kv_.ForkLocked(*s, *fork, keep);
    }
    return fork->info;
  }

  StatusOr<SessionInfo> Truncate(const std::string& id, int64_t tokens,
                                 CallerThread& caller) override {
    std::lock_guard<std::mutex> lock(mu_);
    const Clock::time_point now = options_.clock->Now();
    table_.SweepLocked(now);
    auto found = table_.IdleSessionLocked(id, "truncate");
    if (!found.ok()) return found.status();
    const Ptr& s = *found;
    MHA_RETURN_IF_ERROR(CheckTruncate(*s));
    MHA_RETURN_IF_ERROR(CheckBranchTokens(id, tokens, s->info.tokens));
    MHA_RETURN_IF_ERROR(table_.RestoreLocked(s, PerBlockLocked(), caller));
    MHA_RETURN_IF_ERROR(s->cache->TruncateTo(tokens));
    if (kv_.on()) kv_.TruncateLocked(*s, tokens);
    s->info.tokens = tokens;
    s->info.blocks = s->cache->blocks_held();
    s->info.shared_blocks = s->cache->shared_blocks_held();
    s->last_used = now;
    table_.PublishLocked();
    return s->info;
  }

  SessionUsage usage() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return table_.UsageLocked();
  }

  void SweepExpired() override {
    std::lock_guard<std::mutex> lock(mu_);
    table_.SweepLocked(options_.clock->Now());
  }

  // The step protocol (above). `field(i)` prefixes what is said of entry i ("" for a one-session
  // step, "entries[i].session_id: " for a message). On OK, exactly one of `start` and `refuse`
  // will run; otherwise neither.
  Status Acquire(const std::vector<std::string>& ids,
                 const std::function<std::string(size_t)>& field,
                 std::function<void(Hold, CallerThread&)> start, std::function<void(Status)> refuse,
                 CallerThread& caller) {
    auto turn = std::make_shared<StepTurn>();
    std::vector<std::weak_ptr<Session>> sessions;
    bool now = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      table_.SweepLocked(options_.clock->Now());
      std::vector<std::string> labels;
      for (size_t i = 0; i < ids.size(); ++i) {
        auto it = table_.sessions().find(ids[i]);
        if (it == table_.sessions().end()) {
          const Status gone = table_.directory().NotFoundFor(ids[i]);
          return Status(gone.code(), field(i) + gone.message());
        }
        if (it->second->durable.leaving) {
          return Unavailable(field(i) + "session '" + Abbreviate(ids[i]) +
                             "' is moving to another replica (shared KV store): retry");
        }
        sessions.push_back(it->second);
        turn->lines.push_back(&it->second->steps);
        labels.push_back(field(i) + "session '" + Abbreviate(ids[i]) + "'");
      }
      // The turn keeps its sessions weakly: a session that ends drops the turns waiting for it
      // first, so every one is alive when the turn starts.
      std::weak_ptr<StepTurn> weak = turn;
      turn->start = [sessions, weak, start = std::move(start)](CallerThread& on) {
        Hold hold{{}, weak.lock()};
        for (const auto& s : sessions) hold.sessions.push_back(s.lock());
        start(std::move(hold), on);
      };
      turn->refuse = [field, refuse = std::move(refuse)](size_t entry, Status why) {
        refuse(Status(why.code(), field(entry) + why.message()));
      };
      MHA_RETURN_IF_ERROR(table_.gate().EnterLocked(turn, labels, &now));
    }
    if (now) StepGate::Start({turn}, caller);
    return Status::Ok();
  }

  // Before a held session's step (Prepare, above). NOT_FOUND when it ended while the step waited.
  Status Prepare(const Ptr& session, const StepPlan& plan, CallerThread& caller) {
    std::lock_guard<std::mutex> lock(mu_);
    if (session->ended) return table_.EndedWhileWaitingLocked(session->info.id);
    MHA_RETURN_IF_ERROR(CheckResyncLocked(*session));
    MHA_RETURN_IF_ERROR(plan.check(*session));
    // A spilled session's blocks come back first (room made as for a step: the sessions a step
    // holds are never spilled).
    MHA_RETURN_IF_ERROR(table_.RestoreLocked(session, PerBlockLocked(), caller));
    MHA_RETURN_IF_ERROR(table_.MakeRoomLocked(plan.blocks(*session), session.get(), plan.what,
                                              PerBlockLocked(), caller));
    const Status reserved = plan.reserve(*session);
    table_.PublishLocked();
    return reserved;
  }

  // After the step (Finish, above): `update` runs on each session under the lock, then `answer`
  // outside it, then the steps waiting behind start (on this thread, a worker's).
  void Finish(const Hold& hold, const std::function<void(Session&)>& update,
              const std::function<void()>& answer) {
    std::vector<StepTurnPtr> ready;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const Clock::time_point now = options_.clock->Now();
      for (const Ptr& s : hold.sessions) {
        s->last_used = now;
        if (update) update(*s);
        if (kv_.on() && !s->ended) kv_.AfterStepLocked(*s);
      }
      ready = table_.LeaveLocked(hold.turn, hold.sessions);
    }
    if (answer) answer();
    StepGate::Start(ready);
  }

  int64_t block_tokens() const { return options_.pool.block_tokens; }

  // The shared KV tier (session_store_kv.h defines these).
  Status Claim(const std::string& id) override;
  void Unclaim(const std::string& id) override;
  Status Adopt(const std::string& id, CallerThread& caller) override;
  bool ReleaseForHandover(const std::string& id) override;
  int64_t ReleaseAll(std::chrono::steady_clock::time_point deadline) override;
  std::vector<SessionLease> Leases() override;
  void LeaseLost(const std::string& id) override;
  int64_t CatchUp() override;

 protected:
  SessionStore(SessionOptions options, SessionLocation location,
               std::shared_ptr<SessionDirectory> directory, StatsAggregator* metrics,
               SessionPool pool)
      : options_(std::move(options)),
        location_(std::move(location)),
        pool_(std::move(pool)),
        table_(options_, location_, std::move(directory), metrics),
        kv_(options_.kv_tier, location_, pool_.kind) {
    if (!kv_.on()) return;
    table_.set_on_removed([this](const Session& s) { kv_.RemoveLocked(s); });
    kv_.tier().Register(this);
  }

  // How many of the cache's tokens a fork keeping `keep` tokens shares, or the kind's refusal.
  virtual StatusOr<int64_t> ForkTokens(const Session& source, int64_t keep) const { return keep; }
  // The kind's refusal to truncate `session`, or OK.
  virtual Status CheckTruncate(const Session& session) const { return Status::Ok(); }
  // The shared KV tier's restore: how many layers the kind's caches have, and an empty cache for
  // the session `record` describes (its rows, max_tokens) on the version's pool.
  virtual int64_t CacheLayers() const { return 1; }
  virtual StatusOr<std::unique_ptr<Cache>> EmptyCacheLocked(const SessionRecord& record) {
    return Unimplemented("this kind's sessions are not restored from a KV store");
  }

  // Open's first part, under the lock: expired sessions ended, the pool made on the first call,
  // then `make`: the kind's cache for the new session, which takes its first blocks
  // (MakeRoomLocked first).
  Status MakeSessionLocked(Session& session, const std::function<Status(Session&)>& make) {
    table_.SweepLocked(options_.clock->Now());
    MHA_RETURN_IF_ERROR(EnsurePoolLocked());
    session.info.block_tokens = table_.pool()->block_tokens();
    return make(session);
  }
  // Open's last part, under the lock: the session registered here and server-wide under `id` (""
  // = a new one); an id open anywhere on this server is refused, and its blocks go back.
  StatusOr<SessionInfo> RegisterLocked(const Ptr& session, const std::string& id) {
    auto info = table_.OpenLocked(session, id, options_.clock->Now());
    if (info.ok() && kv_.on()) kv_.AttachLocked(*session, table_.pool()->block_tokens());
    return info;
  }
  Status EnsurePoolLocked() {
    return table_.EnsurePoolLocked(pool_.make, pool_.describe, pool_.device);
  }
  // Frees `blocks` blocks for a new session (never a session a step holds).
  Status MakeRoomLocked(int64_t blocks, const std::string& what, CallerThread& caller) {
    return table_.MakeRoomLocked(blocks, nullptr, what, PerBlockLocked(), caller);
  }
  std::string PerBlockLocked() const { return pool_.per_block(*table_.pool()); }

  const SessionOptions options_;
  const SessionLocation location_;
  const SessionPool pool_;
  mutable std::mutex mu_;
  SessionTable<Session> table_;  // guarded by mu_
  SessionKv<Session> kv_;        // its *Locked functions under mu_

 private:
  // A session restored from the store after its replica was lost refuses its first step, saying
  // how many tokens it holds: the client replays from there (client::DecodingSession does).
  Status CheckResyncLocked(Session& s) {
    if (s.durable.resync_tokens < 0) return Status::Ok();
    const int64_t n = s.durable.resync_tokens;
    s.durable.resync_tokens = -1;
    return Aborted("session '" + Abbreviate(s.info.id) +
                   "' was restored from the shared KV store "
                   "with " +
                   std::to_string(n) +
                   " tokens per row (its replica was lost before it "
                   "wrote the rest): replay from token " +
                   std::to_string(n) + " [session_tokens=" + std::to_string(n) + "]");
  }
  // Restore of a session read from the store (session_store_kv.h).
  Status AdoptLocked(const std::string& id, const SessionRecord& record,
                     const std::vector<std::vector<std::string>>& data, const SessionLease& lease,
                     CallerThread& caller);
  // ReleaseForHandover's part under the lock: false when `id` is not here or still held by a step.
  StatusOr<bool> ReleaseIdleLocked(const std::string& id, const std::string& why);

  // Ends every session; the steps still waiting for one are answered NOT_FOUND.
  void EndAll() {
    std::vector<StepGate::Dropped> dropped;
    Status why;
    {
      std::lock_guard<std::mutex> lock(mu_);
      table_.EndAllLocked(&dropped, &why);
    }
    StepGate::Refuse(dropped, why);
  }
};

}  // namespace mha::serve

#include "server/serving/sessions/session_store_kv.h"  // NOLINT: the definitions above
