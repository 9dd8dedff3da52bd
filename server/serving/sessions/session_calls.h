// The session calls every kind's store makes the same way on its SessionTable, with the store's
// lock held: CloseSession, ForkSession and TruncateSession (docs/sessions.md, "Fork, truncate and
// spill"). A kind adds only its own checks (a one-layer cross-attention session forks whole and is
// never truncated) and how many of the cache's tokens a fork shares.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/serving/clock.h"
#include "server/serving/sessions/session_directory.h"
#include "server/serving/sessions/session_spill.h"
#include "server/serving/sessions/session_table.h"
#include "server/serving/sessions/step_gate.h"

namespace mha::serve {

// The steps a CloseSession refused (they waited for the session) or let start (they waited
// behind those): answered by Finish, after the store lets go of its lock.
struct ClosedSteps {
  std::vector<StepGate::Dropped> dropped;
  std::vector<StepTurnPtr> ready;
  Status why;  // what the refused steps are told
  void Finish() const {
    StepGate::Refuse(dropped, why);
    StepGate::Start(ready);
  }
};

// Closes session `id`: its info as it closed (the blocks it held), or NOT_FOUND with the
// directory's reason. The step running on it keeps its cache until it leaves the gate.
template <typename Session>
StatusOr<SessionInfo> CloseSessionLocked(SessionTable<Session>& table, const std::string& id,
                                         ClosedSteps* steps) {
  auto it = table.sessions().find(id);
  if (it == table.sessions().end()) return table.directory().NotFoundFor(id);
  const std::shared_ptr<Session> session = it->second;
  SessionInfo info = session->info;
  info.blocks = session->cache->blocks_held();
  table.CloseLocked(session, "was closed (CloseSession)", &steps->dropped, &steps->ready);
  steps->why = table.EndedWhileWaitingLocked(id);
  return info;
}

// Session `id` to fork or truncate (`what`) at `tokens`: open here (NOT_FOUND), no step queued or
// running (FAILED_PRECONDITION), `tokens` within the tokens it holds (CheckBranchTokens).
template <typename Session>
StatusOr<std::shared_ptr<Session>> BranchSourceLocked(SessionTable<Session>& table,
                                                      const std::string& id,
                                                      const std::string& what, int64_t tokens) {
  auto found = table.IdleSessionLocked(id, what);
  if (!found.ok()) return found.status();
  MHA_RETURN_IF_ERROR(CheckBranchTokens(id, tokens, (*found)->info.tokens));
  return found;
}

// Forks `source` (restored first when spilled): a new session under `new_id` ("" = a new id)
// whose cache shares the first `cache_tokens` of the source's blocks and which holds `tokens`
// tokens; registered here and in the server-wide directory (an id open anywhere is refused, and
// the fork's block references go back with it).
template <typename Session>
StatusOr<SessionInfo> ForkSessionLocked(SessionTable<Session>& table,
                                        const std::shared_ptr<Session>& source,
                                        int64_t cache_tokens, int64_t tokens,
                                        const std::string& new_id, Clock::time_point now,
                                        const std::string& per_block) {
  MHA_RETURN_IF_ERROR(table.RestoreLocked(source, per_block));
  auto cache = source->cache->Fork(cache_tokens);
  if (!cache.ok()) return cache.status();
  auto fork = std::make_shared<Session>();
  fork->info = source->info;
  fork->info.id = new_id.empty() ? NewSessionId() : new_id;
  fork->info.tokens = tokens;
  fork->cache = std::move(cache.value());
  fork->info.blocks = fork->cache->blocks_held();
  fork->info.shared_blocks = fork->cache->shared_blocks_held();
  fork->last_used = source->last_used = now;
  MHA_RETURN_IF_ERROR(table.AddLocked(fork));
  return fork->info;
}

// Keeps the first `tokens` tokens of `session` (restored first when spilled), its later blocks
// back to the pool.
template <typename Session>
StatusOr<SessionInfo> TruncateSessionLocked(SessionTable<Session>& table,
                                            const std::shared_ptr<Session>& session, int64_t tokens,
                                            Clock::time_point now, const std::string& per_block) {
  MHA_RETURN_IF_ERROR(table.RestoreLocked(session, per_block));
  MHA_RETURN_IF_ERROR(session->cache->TruncateTo(tokens));
  session->info.tokens = tokens;
  session->info.blocks = session->cache->blocks_held();
  session->info.shared_blocks = session->cache->shared_blocks_held();
  session->last_used = now;
  table.PublishLocked();
  return session->info;
}

}  // namespace mha::serve
