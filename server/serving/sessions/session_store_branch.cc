// SessionStore's branching calls (docs/sessions.md, "Fork, truncate and spill"): ForkSession and
// TruncateSession of the one-layer models' sessions.
#include <utility>

#include "mha/text.h"
#include "server/serving/sessions/session_store.h"

namespace mha::serve {

StatusOr<SessionInfo> SessionStore::Fork(const std::string& id, int64_t tokens,
                                         const std::string& new_id) {
  std::lock_guard<std::mutex> lock(mu_);
  table_.SweepLocked(options_.clock->Now());
  auto found = table_.IdleSessionLocked(id, "fork");
  if (!found.ok()) return found.status();
  const SessionPtr source = *found;
  const int64_t length = source->info.tokens;
  MHA_RETURN_IF_ERROR(CheckBranchTokens(id, tokens, length));
  const int64_t keep = tokens == 0 ? length : tokens;
  if (source->info.cross && keep != length) {
    return FailedPrecondition("tokens: session '" + Abbreviate(id) +
                              "' is a cross-attention session: its cache holds the encoder's "
                              "keys, so it forks whole only (tokens 0 or " +
                              std::to_string(length) + "), got " + std::to_string(tokens));
  }
  MHA_RETURN_IF_ERROR(table_.RestoreLocked(source, PerBlockLocked()));
  // A cross-attention fork shares every encoder key; a self-attention one the first `keep` tokens.
  auto cache = source->cache->Fork(source->info.cross ? source->cache->length() : keep);
  if (!cache.ok()) return cache.status();
  auto fork = std::make_shared<Session>();
  fork->info = source->info;
  fork->info.id = new_id.empty() ? NewSessionId() : new_id;
  fork->info.tokens = keep;
  fork->cache = std::move(cache.value());
  fork->info.blocks = fork->cache->blocks_held();
  fork->info.shared_blocks = fork->cache->shared_blocks_held();
  fork->last_used = source->last_used = options_.clock->Now();
  // The directory spans every version: an id open anywhere on this server is refused here,
  // atomically (the fork's references go back with `fork`).
  MHA_RETURN_IF_ERROR(table_.AddLocked(fork));
  return fork->info;
}

StatusOr<SessionInfo> SessionStore::Truncate(const std::string& id, int64_t tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  table_.SweepLocked(options_.clock->Now());
  auto found = table_.IdleSessionLocked(id, "truncate");
  if (!found.ok()) return found.status();
  Session& s = **found;
  if (s.info.cross) {
    return FailedPrecondition("session '" + Abbreviate(id) +
                              "' is a cross-attention session: its cache holds the encoder's "
                              "keys, not decoded tokens, and cannot be truncated");
  }
  MHA_RETURN_IF_ERROR(CheckBranchTokens(id, tokens, s.info.tokens));
  MHA_RETURN_IF_ERROR(table_.RestoreLocked(*found, PerBlockLocked()));
  MHA_RETURN_IF_ERROR(s.cache->TruncateTo(tokens));
  s.info.tokens = tokens;
  s.info.blocks = s.cache->blocks_held();
  s.info.shared_blocks = s.cache->shared_blocks_held();
  s.last_used = options_.clock->Now();
  table_.PublishLocked();
  return s.info;
}

}  // namespace mha::serve
