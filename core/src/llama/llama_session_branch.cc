// LlamaSessionCache's branches (docs/sessions.md): fork, truncate, spill and restore of every
// layer.
#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "mha/kv_spill.h"
#include "mha/llama_session_cache.h"

namespace mha {

int64_t LlamaSessionCache::shared_blocks_held() const {
  int64_t n = 0;
  for (const auto& cache : layers_) n += cache->shared_blocks_held();
  return n;
}

bool LlamaSessionCache::spilled() const {
  for (const auto& cache : layers_) {
    if (cache->spilled()) return true;
  }
  return false;
}

int64_t LlamaSessionCache::spilled_bytes() const {
  int64_t n = 0;
  for (const auto& cache : layers_) n += cache->spilled_bytes();
  return n;
}

int64_t LlamaSessionCache::BlocksToRestore() const {
  int64_t n = 0;
  for (const auto& cache : layers_) n += cache->spilled() ? cache->BlocksNeeded(0) : 0;
  return n;
}

StatusOr<std::unique_ptr<LlamaSessionCache>> LlamaSessionCache::Fork(int64_t tokens) const {
  if (spilled()) return FailedPrecondition("cannot fork a spilled session: restore it first");
  if (tokens < 0 || tokens > length(0)) {
    return OutOfRange("fork of " + std::to_string(tokens) +
                      " tokens: layer 0 of the session holds " + std::to_string(length(0)) +
                      " (0 .. " + std::to_string(length(0)) + ")");
  }
  std::unique_ptr<LlamaSessionCache> fork(new LlamaSessionCache());
  fork->max_tokens_ = max_tokens_;
  for (const auto& cache : layers_) {
    auto layer = cache->Fork(std::min(tokens, cache->length()));
    if (!layer.ok()) return layer.status();
    fork->layers_.push_back(std::move(layer.value()));
  }
  return fork;
}

Status LlamaSessionCache::TruncateTo(int64_t tokens) {
  if (spilled()) return FailedPrecondition("cannot truncate a spilled session: restore it first");
  if (tokens < 0 || tokens > length(0)) {
    return OutOfRange("truncate to " + std::to_string(tokens) +
                      " tokens: layer 0 of the session holds " + std::to_string(length(0)) +
                      " (0 .. " + std::to_string(length(0)) + ")");
  }
  for (auto& cache : layers_) {
    MHA_RETURN_IF_ERROR(cache->TruncateTo(std::min(tokens, cache->length())));
  }
  return Status::Ok();
}

Status LlamaSessionCache::Spill(std::shared_ptr<KvSpillStore> store,
                                const std::string& key_prefix) {
  if (store == nullptr) return InvalidArgument("LlamaSessionCache::Spill: no spill store");
  if (spilled()) return FailedPrecondition("the session '" + key_prefix + "' is spilled already");
  int64_t bytes = 0;
  for (const auto& cache : layers_) {
    bytes += cache->rows() * cache->length() * cache->pool().bytes_per_token();
  }
  const int64_t held = store->bytes_held(), bound = store->max_bytes();
  if (bound > 0 && held + bytes > bound) {
    return ResourceExhausted("spill store (" + store->Describe() + ") full: session '" +
                             key_prefix + "' needs " + std::to_string(bytes) + " bytes over " +
                             std::to_string(num_layers()) + " layers, " + std::to_string(held) +
                             " of " + std::to_string(bound) + " held (--kv-spill-bytes)");
  }
  for (size_t l = 0; l < layers_.size(); ++l) {
    Status s =
        layers_[l]->Spill(store, key_prefix + "/layer" + std::to_string(static_cast<int64_t>(l)));
    if (s.ok()) continue;
    for (size_t back = 0; back < l; ++back) {
      Status undo = layers_[back]->Restore();  // the blocks it just gave back
      if (!undo.ok())
        return Status(s.code(), s.message() + "; layer " +
                                    std::to_string(static_cast<int64_t>(back)) +
                                    " stays spilled: " + undo.message());
    }
    return s;
  }
  return Status::Ok();
}

Status LlamaSessionCache::Restore() {
  if (!spilled())
    return FailedPrecondition("LlamaSessionCache::Restore: the session is not spilled");
  KvBlockPool& pool = *layers_.front()->pool_;
  auto blocks = pool.Allocate(BlocksToRestore());
  if (!blocks.ok()) {
    return Status(blocks.status().code(),
                  "restoring a spilled session of " + std::to_string(num_layers()) + " layers (" +
                      std::to_string(spilled_bytes()) + " bytes): " + blocks.status().message());
  }
  auto next = blocks->begin();
  Status first;
  for (auto& cache : layers_) {
    if (!cache->spilled()) continue;
    const auto count = static_cast<size_t>(cache->BlocksNeeded(0));
    std::vector<int64_t> mine(next, next + static_cast<std::ptrdiff_t>(count));
    next += static_cast<std::ptrdiff_t>(count);
    if (!first.ok()) {
      pool.Release(mine);  // an earlier layer failed: the rest stay spilled
      continue;
    }
    first = cache->RestoreWith(std::move(mine));
  }
  return first;
}

}  // namespace mha
