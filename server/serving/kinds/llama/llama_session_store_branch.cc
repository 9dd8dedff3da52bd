// LlamaSessionStore's branching calls (docs/afd.md, "Fork, truncate and spill"): ForkSession and
// TruncateSession of a stack's sessions, every layer at once (sessions/session_calls.h).
#include "server/serving/kinds/llama/llama_session_store.h"
#include "server/serving/sessions/session_calls.h"

namespace mha::serve {

StatusOr<SessionInfo> LlamaSessionStore::Fork(const std::string& id, int64_t tokens,
                                              const std::string& new_id) {
  std::lock_guard<std::mutex> lock(mu_);
  table_.SweepLocked(options_.clock->Now());
  auto source = BranchSourceLocked(table_, id, "fork", tokens);
  if (!source.ok()) return source.status();
  const int64_t keep = tokens == 0 ? (*source)->info.tokens : tokens;
  return ForkSessionLocked(table_, *source, keep, keep, new_id, options_.clock->Now(),
                           PerBlockLocked());
}

StatusOr<SessionInfo> LlamaSessionStore::Truncate(const std::string& id, int64_t tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  table_.SweepLocked(options_.clock->Now());
  auto session = BranchSourceLocked(table_, id, "truncate", tokens);
  if (!session.ok()) return session.status();
  return TruncateSessionLocked(table_, *session, tokens, options_.clock->Now(), PerBlockLocked());
}

}  // namespace mha::serve
