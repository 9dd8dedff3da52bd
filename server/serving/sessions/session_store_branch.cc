// SessionStore's branching calls (docs/sessions.md, "Fork, truncate and spill"): ForkSession and
// TruncateSession of the one-layer models' sessions (sessions/session_calls.h), with what a
// cross-attention session adds: its cache holds the encoder's keys, so it forks whole only and is
// never truncated.
#include "mha/text.h"
#include "server/serving/sessions/session_calls.h"
#include "server/serving/sessions/session_store.h"

namespace mha::serve {

StatusOr<SessionInfo> SessionStore::Fork(const std::string& id, int64_t tokens,
                                         const std::string& new_id) {
  std::lock_guard<std::mutex> lock(mu_);
  table_.SweepLocked(options_.clock->Now());
  auto source = BranchSourceLocked(table_, id, "fork", tokens);
  if (!source.ok()) return source.status();
  const Session& s = **source;
  const int64_t length = s.info.tokens, keep = tokens == 0 ? length : tokens;
  if (s.info.cross && keep != length) {
    return FailedPrecondition("tokens: session '" + Abbreviate(id) +
                              "' is a cross-attention session: its cache holds the encoder's "
                              "keys, so it forks whole only (tokens 0 or " +
                              std::to_string(length) + "), got " + std::to_string(tokens));
  }
  // A cross-attention fork shares every encoder key; a self-attention one the first `keep` tokens.
  return ForkSessionLocked(table_, *source, s.info.cross ? s.cache->length() : keep, keep, new_id,
                           options_.clock->Now(), PerBlockLocked());
}

StatusOr<SessionInfo> SessionStore::Truncate(const std::string& id, int64_t tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  table_.SweepLocked(options_.clock->Now());
  auto session = table_.IdleSessionLocked(id, "truncate");
  if (!session.ok()) return session.status();
  if ((*session)->info.cross) {
    return FailedPrecondition("session '" + Abbreviate(id) +
                              "' is a cross-attention session: its cache holds the encoder's "
                              "keys, not decoded tokens, and cannot be truncated");
  }
  MHA_RETURN_IF_ERROR(CheckBranchTokens(id, tokens, (*session)->info.tokens));
  return TruncateSessionLocked(table_, *session, tokens, options_.clock->Now(), PerBlockLocked());
}

}  // namespace mha::serve
