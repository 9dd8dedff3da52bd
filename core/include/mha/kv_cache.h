// Paged KV cache for decoding sessions (vLLM's PagedAttention block pool): the projected keys and
// values of the tokens a session has seen, per head, in fixed-size blocks taken from one pool per
// model. A session's cache grows block by block and gives its blocks back when it ends.
//
// Storage: one keys tensor and one values tensor per pool, [blocks * block_tokens, H, head_dim]
// (a "slot" is one token of one sequence), in the model's compute dtype on its device. H is the
// number of heads the cache stores: an MhaModel's num_heads, or a grouped-query model's K/V heads
// (mha/llama_stack.h). Appends write the projected [B, T, H * head_dim] rows (before split_heads)
// into their slots; a gather over the block table gives the seeds' split_heads layout
// [B, H, S, head_dim].
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mha/status.h"

namespace at {
class Tensor;  // LibTorch stays out of this header: the serving layer holds caches (engine.h)
}  // namespace at

namespace mha {

class MhaModel;

struct KvPoolOptions {
  int64_t capacity_bytes = int64_t{256} << 20;  // keys + values of every block (--kv-cache-bytes)
  int64_t block_tokens = 16;                    // tokens per block (--kv-block-tokens)
};

struct KvLayout;  // mha/kv_layout.h (LibTorch types): what one token of one sequence stores

class KvBlockPool {
 public:
  // A pool for `model`'s heads, in its compute dtype on its device: capacity_bytes / block_bytes()
  // blocks, allocated at once (on the CPU the pages are touched only as blocks are written).
  // INVALID_ARGUMENT when block_tokens < 1 or not one block fits, naming the numbers.
  static StatusOr<std::shared_ptr<KvBlockPool>> Create(const KvPoolOptions& options,
                                                       const MhaModel& model);
  // The same for any layout (a grouped-query model's K/V heads: LlamaAttentionStack::CreateKvPool).
  static StatusOr<std::shared_ptr<KvBlockPool>> Create(const KvPoolOptions& options,
                                                       const KvLayout& layout);

  // `count` free block ids, or RESOURCE_EXHAUSTED naming what was asked and what is free.
  // All or nothing: on failure no block is taken.
  StatusOr<std::vector<int64_t>> Allocate(int64_t count);
  void Release(const std::vector<int64_t>& blocks);

  int64_t total_blocks() const { return total_blocks_; }
  int64_t used_blocks() const;
  int64_t free_blocks() const { return total_blocks_ - used_blocks(); }
  int64_t block_tokens() const { return block_tokens_; }
  int64_t block_bytes() const { return block_bytes_; }  // keys + values of one block
  int64_t bytes_per_token() const { return block_bytes_ / block_tokens_; }  // 2 * H * D * dtype
  int64_t heads() const { return heads_; }        // heads stored per token
  int64_t head_dim() const { return head_dim_; }  // D

  // [total_blocks * block_tokens, H, head_dim]; writers own disjoint slots (their blocks).
  const at::Tensor& keys() const;
  const at::Tensor& values() const;

 private:
  KvBlockPool() = default;
  // `per_token` explains the bytes per token in the error when not one block fits.
  static StatusOr<std::shared_ptr<KvBlockPool>> Make(const KvPoolOptions& options,
                                                     const KvLayout& layout,
                                                     const std::string& per_token);

  int64_t total_blocks_ = 0;
  int64_t block_tokens_ = 0;
  int64_t block_bytes_ = 0;
  int64_t heads_ = 0, head_dim_ = 0;
  struct Storage;  // the keys and values tensors (kv_cache.cc)
  std::shared_ptr<Storage> storage_;
  mutable std::mutex mu_;
  std::vector<int64_t> free_;  // guarded by mu_; a stack: the last freed block is reused first
};

// One session's cache: `rows` sequences (the session's batch) growing together. Not thread-safe:
// a session runs one step at a time. Its blocks go back to the pool on Release or destruction.
class KvCache {
 public:
  KvCache(std::shared_ptr<KvBlockPool> pool, int64_t rows);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int64_t rows() const { return rows_; }
  int64_t length() const { return length_; }  // tokens cached per row
  int64_t blocks_held() const;                // over every row
  const KvBlockPool& pool() const { return *pool_; }
  // Blocks `extra` more tokens per row would take from the pool.
  int64_t BlocksNeeded(int64_t extra) const;

  // Row `row`'s block ids in order: position p lies in slot table(row)[p / block_tokens] *
  // block_tokens + p % block_tokens of the pool's keys() / values().
  const std::vector<int64_t>& table(int64_t row) const {
    return tables_.at(static_cast<size_t>(row));
  }

  // Makes room for `extra` more tokens per row: new blocks from the pool, or RESOURCE_EXHAUSTED
  // with nothing taken.
  Status Reserve(int64_t extra);
  // Appends k, v ([rows, T, H * head_dim], projected, before split_heads; any strides) at
  // positions length() .. length() + T - 1. Reserve(T) must have succeeded. Throws c10::Error on
  // misuse. On the CPU each token's row is copied straight into its slot of the page.
  void Append(const at::Tensor& k, const at::Tensor& v);
  // The cached keys / values in split_heads layout [rows, H, length(), head_dim]: one gather of
  // whole blocks (one index per block), narrowed to length().
  at::Tensor Keys() const;
  at::Tensor Values() const;
  // Forgets the tokens after `length` (a failed step's appends); their blocks stay reserved.
  void Truncate(int64_t length) { length_ = std::min(length_, length); }
  // Gives every block back: the cache is empty (and may grow again).
  void Release();

 private:
  friend struct KvBatch;  // several caches' appends and gathers in one op (core/src/kv_batch.h)

  // Slot ids of positions [begin, begin + count) of every row, row by row, appended to `out`.
  void SlotIds(int64_t begin, int64_t count, std::vector<int64_t>* out) const;
  // The same as a tensor: [rows * count], int64 on the pool's device.
  at::Tensor Slots(int64_t begin, int64_t count) const;
  at::Tensor Gather(const at::Tensor& store) const;
  // CPU: x [rows, T, E] at positions [begin, begin + T) of every row, one memcpy per token.
  void WriteRows(const at::Tensor& x, const at::Tensor& store, int64_t begin) const;

  std::shared_ptr<KvBlockPool> pool_;
  int64_t rows_ = 0;
  int64_t length_ = 0;
  std::vector<std::vector<int64_t>> tables_;  // per row: its block ids in order
};

}  // namespace mha
