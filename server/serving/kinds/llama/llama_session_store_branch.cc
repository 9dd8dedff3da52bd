// LlamaSessionStore's branching calls (docs/afd.md, "Fork, truncate and spill"): ForkSession and
// TruncateSession of a stack's sessions, every layer at once.
#include <utility>

#include "server/serving/kinds/llama/llama_session_store.h"

namespace mha::serve {

StatusOr<SessionInfo> LlamaSessionStore::Fork(const std::string& id, int64_t tokens,
                                              const std::string& new_id) {
  std::lock_guard<std::mutex> lock(mu_);
  table_.SweepLocked(options_.clock->Now());
  auto found = table_.IdleSessionLocked(id, "fork");
  if (!found.ok()) return found.status();
  const LlamaSessionRef source = *found;
  const int64_t length = source->cache->length(0);
  MHA_RETURN_IF_ERROR(CheckBranchTokens(id, tokens, length));
  MHA_RETURN_IF_ERROR(table_.RestoreLocked(source, PerBlockLocked()));
  auto cache = source->cache->Fork(tokens == 0 ? length : tokens);
  if (!cache.ok()) return cache.status();
  auto fork = std::make_shared<LlamaSession>();
  fork->info = source->info;
  fork->info.id = new_id.empty() ? NewSessionId() : new_id;
  fork->cache = std::move(cache.value());
  fork->info.tokens = fork->cache->length(0);
  fork->info.blocks = fork->cache->blocks_held();
  fork->info.shared_blocks = fork->cache->shared_blocks_held();
  fork->last_used = source->last_used = options_.clock->Now();
  // The directory spans every version: an id open anywhere on this server is refused here,
  // atomically (the fork's references go back with `fork`).
  MHA_RETURN_IF_ERROR(table_.AddLocked(fork));
  return fork->info;
}

StatusOr<SessionInfo> LlamaSessionStore::Truncate(const std::string& id, int64_t tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  table_.SweepLocked(options_.clock->Now());
  auto found = table_.IdleSessionLocked(id, "truncate");
  if (!found.ok()) return found.status();
  LlamaSession& s = **found;
  MHA_RETURN_IF_ERROR(CheckBranchTokens(id, tokens, s.cache->length(0)));
  MHA_RETURN_IF_ERROR(table_.RestoreLocked(*found, PerBlockLocked()));
  MHA_RETURN_IF_ERROR(s.cache->TruncateTo(tokens));
  s.info.tokens = s.cache->length(0);
  s.info.blocks = s.cache->blocks_held();
  s.info.shared_blocks = s.cache->shared_blocks_held();
  s.last_used = options_.clock->Now();
  table_.PublishLocked();
  return s.info;
}

}  // namespace mha::serve
