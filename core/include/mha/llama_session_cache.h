// A decoding session of a Llama-family stack: one KV cache per layer, every one drawing its blocks
// from the same pool (the stack's kv_layout(): K/V heads only). Layers advance in order: a step
// may never make layer l > 0 hold more tokens than layer l - 1 (the FFN side sends layer l of a
// token only after layer l - 1 of it), and each layer's RoPE positions come from its own length.
// No LibTorch in this header: the serving layer holds these (mha/llama_engine.h steps them); the
// batched step over sessions is mha/llama_session.h's StepSessions.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mha/kv_cache.h"
#include "mha/status.h"

namespace mha {

struct LlamaSessionOptions {
  std::shared_ptr<KvBlockPool> pool;  // LlamaAttentionStack::CreateKvPool
  int64_t num_layers = 0;             // the stack's num_layers()
  // Tokens a layer may hold; 0 = the pool's bound only. Callers cap it at the model's
  // config().max_positions().
  int64_t max_tokens = 0;
};

// Not thread-safe: a session runs one step at a time. Its blocks go back to the pool on Release
// or destruction.
class LlamaSessionCache {
 public:
  // INVALID_ARGUMENT for no pool, num_layers < 1 or max_tokens < 0.
  static StatusOr<std::unique_ptr<LlamaSessionCache>> Create(const LlamaSessionOptions& options);

  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  int64_t max_tokens() const { return max_tokens_; }
  // Tokens layer `layer` holds (0 <= layer < num_layers()).
  int64_t length(int64_t layer) const { return Layer(layer).length(); }
  KvCache* layer(int64_t layer) { return layers_.at(static_cast<size_t>(layer)).get(); }
  int64_t blocks_held() const;         // over every layer
  int64_t bytes_held() const;          // blocks_held() * the pool's block bytes
  int64_t shared_blocks_held() const;  // those another session holds too (a fork's)

  // Whether `tokens` more tokens may go into layer `layer`: INVALID_ARGUMENT for a layer out of
  // range or tokens < 1; OUT_OF_RANGE past max_tokens ("layer 0 holds 12 tokens + 2 new exceed
  // the session's max_tokens 13"); FAILED_PRECONDITION when layer l > 0 would hold more tokens
  // than layer l - 1 ("layer 2 would hold 5 tokens, more than layer 1's 3: layers advance in
  // order").
  Status CheckStep(int64_t layer, int64_t tokens) const;
  // CheckStep, then room for the tokens in that layer's cache (RESOURCE_EXHAUSTED with nothing
  // taken when the pool is short).
  Status Prepare(int64_t layer, int64_t tokens);
  // Every layer's blocks back to the pool; the session is empty again.
  void Release();

  // A new session of the first `tokens` tokens: every layer keeps min(tokens, its length),
  // sharing its blocks (KvCache::Fork: no block taken until a layer writes). OUT_OF_RANGE for
  // tokens < 0 or past layer 0's length; FAILED_PRECONDITION while spilled. Same max_tokens.
  StatusOr<std::unique_ptr<LlamaSessionCache>> Fork(int64_t tokens) const;
  // Every layer keeps min(tokens, its length), whole blocks past them go back (KvCache::
  // TruncateTo). OUT_OF_RANGE for tokens < 0 or past layer 0's length, with nothing changed.
  Status TruncateTo(int64_t tokens);

  // Spills every layer into `store` under "<key_prefix>/layer<l>" (KvCache::Spill): all or
  // nothing (RESOURCE_EXHAUSTED naming the session's bytes when the store's bound would be
  // exceeded). Restore takes every layer's blocks in one allocation (RESOURCE_EXHAUSTED with
  // nothing changed when the pool is short) and copies the bytes back exactly.
  Status Spill(std::shared_ptr<KvSpillStore> store, const std::string& key_prefix);
  Status Restore();
  bool spilled() const;             // any layer spilled
  int64_t spilled_bytes() const;    // over every layer
  int64_t BlocksToRestore() const;  // the blocks Restore takes

 private:
  LlamaSessionCache() = default;
  const KvCache& Layer(int64_t layer) const { return *layers_.at(static_cast<size_t>(layer)); }

  std::vector<std::unique_ptr<KvCache>> layers_;
  int64_t max_tokens_ = 0;
};

}  // namespace mha
