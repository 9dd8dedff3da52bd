#include "server/serving/kinds/llama/llama_session_store.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "mha/text.h"
#include "server/serving/observability/metrics.h"

namespace mha::serve {

LlamaSessionStore::LlamaSessionStore(SessionOptions options,
                                     std::shared_ptr<const LlamaAttentionStack> stack,
                                     LlamaModelInfo info, SessionLocation location,
                                     std::shared_ptr<SessionDirectory> directory,
                                     StatsAggregator* metrics)
    : options_(std::move(options)),
      stack_(std::move(stack)),
      info_(std::move(info)),
      location_(std::move(location)),
      directory_(std::move(directory)),
      metrics_(metrics) {}

LlamaSessionStore::~LlamaSessionStore() {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string why = "ended: its model '" + location_.model + "' version " +
                          location_.version + " was unloaded or replaced";
  for (auto& [id, session] : sessions_) directory_->End(id, why);
  sessions_.clear();
  PublishLocked();
}

Status LlamaSessionStore::EnsurePoolLocked() {
  if (pool_) return Status::Ok();
  auto pool = CreateLlamaKvPool(*stack_, options_.pool);
  if (!pool.ok()) return pool.status();
  pool_ = *pool;
  spdlog::info(
      "model {} v{}: KV cache pool of {} blocks x {} tokens of one layer ({} bytes each: "
      "{} bytes per token per layer) for {} layers on {}",
      location_.model, location_.version, pool_->total_blocks(), pool_->block_tokens(),
      pool_->block_bytes(), pool_->bytes_per_token(), info_.num_layers, info_.device);
  return Status::Ok();
}

void LlamaSessionStore::EndLocked(const LlamaSessionRef& session, const std::string& why) {
  session->ended = true;
  directory_->End(session->info.id, why);
  sessions_.erase(session->info.id);
  if (session->holders == 0) session->cache->Release();  // else when the last holder is done
}

void LlamaSessionStore::SweepLocked(Clock::time_point now) {
  if (options_.idle_timeout_s <= 0) return;
  const auto timeout = std::chrono::seconds(options_.idle_timeout_s);
  std::vector<LlamaSessionRef> expired;
  for (const auto& [id, session] : sessions_) {
    if (session->holders == 0 && now - session->last_used > timeout) expired.push_back(session);
  }
  for (const auto& session : expired) {
    EndLocked(session, "expired: idle for more than --session-idle-timeout-s " +
                           std::to_string(options_.idle_timeout_s) + " s");
  }
  if (!expired.empty()) PublishLocked();
}

void LlamaSessionStore::SweepExpired() {
  std::lock_guard<std::mutex> lock(mu_);
  SweepLocked(options_.clock->Now());
}

// Frees `blocks` blocks under evict-lru by ending idle sessions (held by no step message), least
// recently used first; under refuse, or when not enough are idle, RESOURCE_EXHAUSTED naming `what`.
Status LlamaSessionStore::MakeRoomLocked(int64_t blocks, const std::string& what) {
  while (pool_->free_blocks() < blocks && options_.full_policy == KvFullPolicy::kEvictLru) {
    LlamaSessionRef victim;
    for (const auto& [id, s] : sessions_) {
      if (s->holders > 0 || s->cache->blocks_held() == 0) continue;
      if (!victim || s->last_used < victim->last_used) victim = s;
    }
    if (!victim) break;
    spdlog::info("model {} v{}: evicting session {} ({} blocks) for {}", location_.model,
                 location_.version, victim->info.id, victim->cache->blocks_held(), what);
    EndLocked(victim,
              "was evicted (least recently used) to free KV cache blocks for another "
              "session (--kv-cache-full-policy evict-lru, --kv-cache-bytes)");
    if (metrics_) metrics_->RecordSessionEviction();
  }
  if (pool_->free_blocks() >= blocks) return Status::Ok();
  return ResourceExhausted(
      "KV cache full: " + what + " needs " + std::to_string(blocks) + " blocks, " +
      std::to_string(pool_->free_blocks()) + " of " + std::to_string(pool_->total_blocks()) +
      " free (" + std::to_string(pool_->block_tokens()) + " tokens of one layer per block, " +
      std::to_string(pool_->bytes_per_token()) + " bytes per token per layer; --kv-cache-bytes, " +
      "--kv-cache-full-policy " + KvFullPolicyName(options_.full_policy) + ")");
}

StatusOr<SessionInfo> LlamaSessionStore::Open(int64_t max_tokens, const std::string& id) {
  auto session = std::make_shared<LlamaSession>();
  std::lock_guard<std::mutex> lock(mu_);
  SweepLocked(options_.clock->Now());
  MHA_RETURN_IF_ERROR(EnsurePoolLocked());
  auto cache = CreateLlamaSession(*stack_, pool_, max_tokens);
  if (!cache.ok()) return cache.status();
  session->cache = std::move(cache.value());
  const int64_t layers = session->cache->num_layers();
  MHA_RETURN_IF_ERROR(MakeRoomLocked(layers * session->cache->layer(0)->BlocksNeeded(1),
                                     "a new session (one block per layer)"));
  for (int64_t l = 0; l < layers; ++l) MHA_RETURN_IF_ERROR(session->cache->layer(l)->Reserve(1));
  session->info.id = id.empty() ? NewSessionId() : id;
  session->info.batch_size = 1;
  session->info.max_tokens = max_tokens;
  session->info.block_tokens = pool_->block_tokens();
  // The directory spans every version: a client id open anywhere on this server is refused here
  // (the session's blocks go back to the pool with `session`).
  MHA_RETURN_IF_ERROR(directory_->Add(session->info.id, location_));
  session->info.blocks = session->cache->blocks_held();
  session->last_used = options_.clock->Now();
  sessions_[session->info.id] = session;
  PublishLocked();
  return session->info;
}

StatusOr<SessionInfo> LlamaSessionStore::Close(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  SweepLocked(options_.clock->Now());
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return directory_->NotFoundFor(id);
  LlamaSessionRef session = it->second;
  SessionInfo info = session->info;
  if (session->holders == 0) info.blocks = session->cache->blocks_held();
  EndLocked(session, "was closed (CloseSession)");
  PublishLocked();
  return info;
}

StatusOr<std::vector<LlamaSessionRef>> LlamaSessionStore::Acquire(
    const std::vector<std::string>& ids) {
  std::lock_guard<std::mutex> lock(mu_);
  SweepLocked(options_.clock->Now());
  std::vector<LlamaSessionRef> held;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string field = "entries[" + std::to_string(i) + "].session_id: ";
    auto it = sessions_.find(ids[i]);
    if (it == sessions_.end()) {
      const Status gone = directory_->NotFoundFor(ids[i]);
      return Status(gone.code(), field + gone.message());
    }
    if (static_cast<size_t>(it->second->holders) >= options_.max_pending_steps) {
      return ResourceExhausted(
          field + "session '" + Abbreviate(ids[i]) + "' has " +
          std::to_string(it->second->holders) + " step messages waiting or running (at most " +
          std::to_string(options_.max_pending_steps) + "); send the next after an answer");
    }
    held.push_back(it->second);
  }
  for (const LlamaSessionRef& s : held) ++s->holders;
  return held;
}

Status LlamaSessionStore::Prepare(const LlamaSessionRef& session, int64_t layer, int64_t tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  LlamaSession& s = *session;
  if (s.ended) {
    return NotFound(directory_->NotFoundFor(s.info.id).message() + " (while this step waited)");
  }
  MHA_RETURN_IF_ERROR(s.cache->CheckStep(layer, tokens));
  const int64_t blocks = s.cache->layer(layer)->BlocksNeeded(tokens);
  MHA_RETURN_IF_ERROR(MakeRoomLocked(blocks, "session '" + s.info.id + "' (" +
                                                 std::to_string(tokens) + " more tokens in layer " +
                                                 std::to_string(layer) + ")"));
  return s.cache->Prepare(layer, tokens);
}

void LlamaSessionStore::Finish(const std::vector<LlamaSessionRef>& sessions) {
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::time_point now = options_.clock->Now();
  for (const LlamaSessionRef& s : sessions) {
    --s->holders;
    s->last_used = now;
    if (s->holders > 0) continue;
    s->info.tokens = s->cache->length(0);
    s->info.blocks = s->cache->blocks_held();
    if (s->ended) s->cache->Release();
  }
  PublishLocked();
}

SessionStore::Usage LlamaSessionStore::usage() const {
  std::lock_guard<std::mutex> lock(mu_);
  SessionStore::Usage u;
  u.sessions = static_cast<int64_t>(sessions_.size());
  if (pool_) {
    u.blocks_used = pool_->used_blocks();
    u.blocks_total = pool_->total_blocks();
    u.block_bytes = pool_->block_bytes();
  }
  return u;
}

void LlamaSessionStore::PublishLocked() const {
  if (!metrics_ || !pool_) return;
  metrics_->SetSessionUsage(static_cast<int64_t>(sessions_.size()), pool_->used_blocks(),
                            pool_->total_blocks(), pool_->block_bytes());
}

}  // namespace mha::serve
