#include "server/serving/kinds/llama/llama_session_store.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "mha/text.h"
#include "server/serving/observability/metrics.h"
#include "server/serving/sessions/session_calls.h"

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
      metrics_(metrics),
      table_(options_, location_, directory_, metrics) {}

LlamaSessionStore::~LlamaSessionStore() {
  std::lock_guard<std::mutex> lock(mu_);
  table_.EndAllLocked();
}

Status LlamaSessionStore::EnsurePoolLocked() {
  return table_.EnsurePoolLocked(
      [this] { return CreateLlamaKvPool(*stack_, options_.pool); },
      [this](const KvBlockPool& pool) {
        spdlog::info(
            "model {} v{}: KV cache pool of {} blocks x {} tokens of one layer ({} bytes each: "
            "{} bytes per token per layer) for {} layers on {}",
            location_.model, location_.version, pool.total_blocks(), pool.block_tokens(),
            pool.block_bytes(), pool.bytes_per_token(), info_.num_layers, info_.device);
      },
      info_.device);
}

std::string LlamaSessionStore::PerBlockLocked() const {
  const KvBlockPool& pool = *table_.pool();
  return std::to_string(pool.block_tokens()) + " tokens of one layer per block, " +
         std::to_string(pool.bytes_per_token()) + " bytes per token per layer";
}

void LlamaSessionStore::SweepExpired() {
  std::lock_guard<std::mutex> lock(mu_);
  table_.SweepLocked(options_.clock->Now());
}

// Frees `blocks` blocks (SessionTable::MakeRoomLocked) by ending sessions no message holds.
Status LlamaSessionStore::MakeRoomLocked(int64_t blocks, const std::string& what) {
  return table_.MakeRoomLocked(blocks, nullptr, what, PerBlockLocked());
}

StatusOr<SessionInfo> LlamaSessionStore::Open(int64_t max_tokens, const std::string& id) {
  auto session = std::make_shared<LlamaSession>();
  std::lock_guard<std::mutex> lock(mu_);
  table_.SweepLocked(options_.clock->Now());
  MHA_RETURN_IF_ERROR(EnsurePoolLocked());
  auto cache = CreateLlamaSession(*stack_, table_.pool(), max_tokens);
  if (!cache.ok()) return cache.status();
  session->cache = std::move(cache.value());
  const int64_t layers = session->cache->num_layers();
  MHA_RETURN_IF_ERROR(MakeRoomLocked(layers * session->cache->layer(0)->BlocksNeeded(1),
                                     "a new session (one block per layer)"));
  for (int64_t l = 0; l < layers; ++l) MHA_RETURN_IF_ERROR(session->cache->layer(l)->Reserve(1));
  session->info.batch_size = 1;
  session->info.max_tokens = max_tokens;
  session->info.block_tokens = table_.pool()->block_tokens();
  return table_.OpenLocked(session, id, options_.clock->Now());
}

StatusOr<SessionInfo> LlamaSessionStore::Close(const std::string& id) {
  ClosedSteps steps;
  StatusOr<SessionInfo> info = NotFound("");
  {
    std::lock_guard<std::mutex> lock(mu_);
    table_.SweepLocked(options_.clock->Now());
    info = CloseSessionLocked(table_, id, &steps);
  }
  steps.Finish();
  return info;
}

Status LlamaSessionStore::Acquire(const std::vector<std::string>& ids,
                                  std::function<void(LlamaStepHold)> start,
                                  std::function<void(Status)> refuse) {
  auto turn = std::make_shared<StepTurn>();
  std::vector<LlamaSessionRef> sessions;
  std::vector<std::string> labels;
  bool now = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    table_.SweepLocked(options_.clock->Now());
    for (size_t i = 0; i < ids.size(); ++i) {
      const std::string field = "entries[" + std::to_string(i) + "].session_id: ";
      auto it = table_.sessions().find(ids[i]);
      if (it == table_.sessions().end()) {
        const Status gone = directory_->NotFoundFor(ids[i]);
        return Status(gone.code(), field + gone.message());
      }
      sessions.push_back(it->second);
      turn->lines.push_back(&it->second->steps);
      labels.push_back(field + "session '" + Abbreviate(ids[i]) + "'");
    }
    // The turn owns its message's callbacks until it leaves; the hold it hands over owns the turn.
    std::weak_ptr<StepTurn> weak = turn;
    turn->start = [sessions, weak, start = std::move(start)] {
      start(LlamaStepHold{sessions, weak.lock()});
    };
    turn->refuse = [refuse = std::move(refuse)](size_t entry, Status why) {
      refuse(Status(why.code(),
                    "entries[" + std::to_string(entry) + "].session_id: " + why.message()));
    };
    MHA_RETURN_IF_ERROR(table_.gate().EnterLocked(turn, labels, &now));
  }
  if (now) turn->start();
  return Status::Ok();
}

Status LlamaSessionStore::Prepare(const LlamaSessionRef& session, int64_t layer, int64_t tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  LlamaSession& s = *session;
  if (s.ended) {
    return NotFound(directory_->NotFoundFor(s.info.id).message() + " (while this step waited)");
  }
  MHA_RETURN_IF_ERROR(s.cache->CheckStep(layer, tokens));
  // A spilled session's layers come back first (room made as for a step: the sessions this
  // message holds are never spilled).
  MHA_RETURN_IF_ERROR(table_.RestoreLocked(session, PerBlockLocked()));
  const int64_t blocks = s.cache->layer(layer)->BlocksNeeded(tokens);
  MHA_RETURN_IF_ERROR(MakeRoomLocked(blocks, "session '" + s.info.id + "' (" +
                                                 std::to_string(tokens) + " more tokens in layer " +
                                                 std::to_string(layer) + ")"));
  return s.cache->Prepare(layer, tokens);
}

void LlamaSessionStore::Finish(const LlamaStepHold& hold) {
  std::vector<StepTurnPtr> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Clock::time_point now = options_.clock->Now();
    for (const LlamaSessionRef& s : hold.sessions) {
      s->last_used = now;
      s->info.tokens = s->cache->length(0);
      s->info.blocks = s->cache->blocks_held();
    }
    ready = table_.LeaveLocked(hold.turn, hold.sessions);
  }
  StepGate::Start(ready);
}

SessionStore::Usage LlamaSessionStore::usage() const {
  std::lock_guard<std::mutex> lock(mu_);
  return table_.UsageLocked();
}

}  // namespace mha::serve
