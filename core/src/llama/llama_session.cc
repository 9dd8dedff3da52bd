#include "mha/llama_session.h"

#include <map>
#include <string>

namespace mha {

StatusOr<std::unique_ptr<LlamaSessionCache>> LlamaSessionCache::Create(
    const LlamaSessionOptions& options) {
  if (!options.pool) return InvalidArgument("LlamaSessionCache: a KV block pool is required");
  if (options.num_layers < 1) {
    return InvalidArgument("LlamaSessionCache: num_layers must be >= 1, got " +
                           std::to_string(options.num_layers));
  }
  if (options.max_tokens < 0) {
    return InvalidArgument("LlamaSessionCache: max_tokens must be >= 0, got " +
                           std::to_string(options.max_tokens));
  }
  std::unique_ptr<LlamaSessionCache> session(new LlamaSessionCache());
  session->max_tokens_ = options.max_tokens;
  for (int64_t l = 0; l < options.num_layers; ++l) {
    session->layers_.push_back(std::make_unique<KvCache>(options.pool, /*rows=*/1));
  }
  return session;
}

int64_t LlamaSessionCache::blocks_held() const {
  int64_t n = 0;
  for (const auto& cache : layers_) n += cache->blocks_held();
  return n;
}

int64_t LlamaSessionCache::bytes_held() const {
  return layers_.empty() ? 0 : blocks_held() * layers_.front()->pool().block_bytes();
}

Status LlamaSessionCache::CheckStep(int64_t layer, int64_t tokens) const {
  if (layer < 0 || layer >= num_layers()) {
    return InvalidArgument("layer " + std::to_string(layer) + " out of range: the session has " +
                           std::to_string(num_layers()) + " layers (0 .. " +
                           std::to_string(num_layers() - 1) + ")");
  }
  if (tokens < 1)
    return InvalidArgument("a step brings >= 1 tokens, got " + std::to_string(tokens));
  const int64_t have = length(layer);
  if (max_tokens_ > 0 && have + tokens > max_tokens_) {
    return OutOfRange("layer " + std::to_string(layer) + " holds " + std::to_string(have) +
                      " tokens + " + std::to_string(tokens) +
                      " new exceed the session's max_tokens " + std::to_string(max_tokens_));
  }
  if (layer > 0 && have + tokens > length(layer - 1)) {
    return FailedPrecondition(
        "layer " + std::to_string(layer) + " would hold " + std::to_string(have + tokens) +
        " tokens, more than layer " + std::to_string(layer - 1) + "'s " +
        std::to_string(length(layer - 1)) + ": layers advance in order (send layer " +
        std::to_string(layer - 1) + " of these tokens first)");
  }
  return Status::Ok();
}

Status LlamaSessionCache::Prepare(int64_t layer, int64_t tokens) {
  MHA_RETURN_IF_ERROR(CheckStep(layer, tokens));
  return layers_[static_cast<size_t>(layer)]->Reserve(tokens);
}

void LlamaSessionCache::Release() {
  for (auto& cache : layers_) cache->Release();
}

Status StepSessions(const LlamaAttentionStack& stack, int64_t layer,
                    const std::vector<LlamaSessionStep>& entries, StepAttention attention) {
  std::vector<LlamaStepItem> items;
  items.reserve(entries.size());
  std::map<const LlamaSessionCache*, size_t> seen;
  for (size_t i = 0; i < entries.size(); ++i) {
    const LlamaSessionStep& e = entries[i];
    const std::string where = "entry " + std::to_string(i) + ": ";
    if (e.session == nullptr) return InvalidArgument(where + "no session");
    if (e.session->num_layers() != stack.num_layers()) {
      return InvalidArgument(where + "the session has " + std::to_string(e.session->num_layers()) +
                             " layers, the model " + std::to_string(stack.num_layers()));
    }
    auto [it, fresh] = seen.emplace(e.session, i);
    if (!fresh) {
      return InvalidArgument(where + "the same session as entry " + std::to_string(it->second) +
                             ": one entry per session and layer in a step");
    }
    if (layer < 0 || layer >= stack.num_layers()) break;  // CheckLlamaStep names it
    KvCache* cache = e.session->layer(layer);
    items.push_back(LlamaStepItem{cache, e.hidden, e.output});
  }
  MHA_RETURN_IF_ERROR(CheckLlamaStep(stack, layer, items));
  for (size_t i = 0; i < entries.size(); ++i) {
    Status s = entries[i].session->Prepare(layer, entries[i].hidden.size(0));
    if (!s.ok()) return Status(s.code(), "entry " + std::to_string(i) + ": " + s.message());
  }
  return LlamaLayerStep(stack, layer, items, attention);
}

}  // namespace mha
