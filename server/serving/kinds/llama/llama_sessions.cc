#include "server/serving/kinds/llama/llama_sessions.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "mha/text.h"

namespace mha::serve {
namespace {

// OpenSession on a Llama version: batch_size 0 or 1, no key/value, max_tokens within
// --max-sequence-length; the session's max_tokens = min(requested or --max-sequence-length, the
// model's max positions).
StatusOr<int64_t> SessionMaxTokens(const LlamaModelInfo& info, const OpenSessionRequest& r,
                                   const RequestLimits& limits) {
  if (r.batch_size < 0 || r.batch_size > 1) {
    return InvalidArgument(
        "batch_size: a Llama model's session decodes one sequence (batch_size 1, or 0 = 1), "
        "got " +
        std::to_string(r.batch_size));
  }
  if (r.key.defined() || r.value.defined()) {
    return InvalidArgument(std::string(r.key.defined() ? "key" : "value") +
                           ": a Llama model's sessions are self-attention (no cross-attention "
                           "key/value)");
  }
  if (r.max_tokens < 0) {
    return InvalidArgument("max_tokens: must be >= 1 (0 = --max-sequence-length), got " +
                           std::to_string(r.max_tokens));
  }
  if (r.max_tokens > limits.max_sequence_length) {
    return ResourceExhausted("max_tokens: " + std::to_string(r.max_tokens) +
                             " exceeds --max-sequence-length " +
                             std::to_string(limits.max_sequence_length));
  }
  const int64_t wanted = r.max_tokens > 0 ? r.max_tokens : limits.max_sequence_length;
  return std::min(wanted, info.max_positions);
}

SessionPool LlamaPool(const std::shared_ptr<const LlamaAttentionStack>& stack,
                      const LlamaModelInfo& info, const SessionOptions& options,
                      const SessionLocation& location) {
  SessionPool pool;
  pool.make = [stack, options] { return CreateLlamaKvPool(*stack, options.pool); };
  pool.describe = [location, layers = info.num_layers, device = info.device](const KvBlockPool& p) {
    spdlog::info(
        "model {} v{}: KV cache pool of {} blocks x {} tokens of one layer ({} bytes each: {} "
        "bytes per token per layer) for {} layers on {}",
        location.model, location.version, p.total_blocks(), p.block_tokens(), p.block_bytes(),
        p.bytes_per_token(), layers, device);
  };
  pool.per_block = [](const KvBlockPool& p) {
    return std::to_string(p.block_tokens()) + " tokens of one layer per block, " +
           std::to_string(p.bytes_per_token()) + " bytes per token per layer";
  };
  pool.device = info.device;
  pool.kind = "llama";
  return pool;
}

}  // namespace

LlamaSessions::LlamaSessions(SessionOptions options, RequestLimits limits,
                             std::shared_ptr<const LlamaAttentionStack> stack, LlamaModelInfo info,
                             SessionLocation location, std::shared_ptr<SessionDirectory> directory,
                             StatsAggregator* metrics)
    : SessionStore<LlamaSessionCache>(options, location, std::move(directory), metrics,
                                      LlamaPool(stack, info, options, location)),
      limits_(limits),
      stack_(std::move(stack)),
      info_(std::move(info)) {}

StatusOr<SessionInfo> LlamaSessions::Open(const OpenSessionRequest& r, CallerThread& caller) {
  auto max_tokens = SessionMaxTokens(info_, r, limits_);
  if (!max_tokens.ok()) return max_tokens.status();
  auto session = std::make_shared<Session>();
  session->info.batch_size = 1;
  session->info.max_tokens = *max_tokens;
  std::lock_guard<std::mutex> lock(mu_);
  MHA_RETURN_IF_ERROR(MakeSessionLocked(*session, [&](Session& s) {
    auto cache = CreateLlamaSession(*stack_, table_.pool(), s.info.max_tokens);
    if (!cache.ok()) return cache.status();
    s.cache = std::move(cache.value());
    const int64_t layers = s.cache->num_layers();
    MHA_RETURN_IF_ERROR(MakeRoomLocked(layers * s.cache->layer(0)->BlocksNeeded(1),
                                       "a new session (one block per layer)", caller));
    for (int64_t l = 0; l < layers; ++l) MHA_RETURN_IF_ERROR(s.cache->layer(l)->Reserve(1));
    return Status::Ok();
  }));
  return RegisterLocked(session, r.session_id);
}

Status LlamaSessions::PrepareLayer(const Ptr& session, int64_t layer, int64_t tokens,
                                   CallerThread& caller) {
  StepPlan plan;
  plan.check = [layer, tokens](const Session& s) { return s.cache->CheckStep(layer, tokens); };
  plan.blocks = [layer, tokens](const Session& s) {
    return s.cache->layer(layer)->BlocksNeeded(tokens);
  };
  plan.what = "session '" + session->info.id + "' (" + std::to_string(tokens) +
              " more tokens in layer " + std::to_string(layer) + ")";
  plan.reserve = [layer, tokens](Session& s) { return s.cache->Prepare(layer, tokens); };
  return Prepare(session, plan, caller);
}

StatusOr<std::unique_ptr<LlamaSessionCache>> LlamaSessions::EmptyCacheLocked(
    const SessionRecord& record) {
  if (record.rows != 1) {
    return DataLoss("session '" + Abbreviate(record.session_id) + "': its stored record has " +
                    std::to_string(record.rows) + " rows; a Llama session decodes one");
  }
  return CreateLlamaSession(*stack_, table_.pool(), record.max_tokens);
}

void LlamaSessions::FinishMessage(const Hold& hold) {
  Finish(
      hold,
      [](Session& s) {
        s.info.tokens = s.cache->length(0);
        s.info.blocks = s.cache->blocks_held();
      },
      nullptr);
}

}  // namespace mha::serve
