// Paged KV cache for decoding sessions (vLLM's PagedAttention block pool): the projected keys and
// values of the tokens a session has seen, per head, in fixed-size blocks taken from one pool per
// model. A session's cache grows block by block and gives its blocks back when it ends.
//
// Blocks are reference counted: a fork (KvCache::Fork) shares its source's blocks, and a write
// never lands in a shared block: Reserve first replaces the block the next tokens go into by a
// copy when another cache holds it too (copy-on-write). A cache may also spill its tokens into a
// KvSpillStore (mha/kv_spill.h) and give every block back, then restore them.
//
// Storage: one keys tensor and one values tensor per pool, [blocks * block_tokens, H, head_dim]
// (a "slot" is one token of one sequence), in the pool's cache dtype (mha/kv_cache_dtype.h: the
// model's compute dtype by default; bf16, fp16, int8...) on the model's device, and for a scaled
// dtype (int8, fp8_e4m3) a (scale, zero) pair per slot and head beside each ([slots, H, 2]
// float32). H is the number of heads the cache stores: an MhaModel's num_heads, or a grouped-query
// model's K/V heads (mha/llama_stack.h). Appends write the projected [B, T, H * head_dim] rows
// (before split_heads) into their slots, encoded there; a gather over the block table gives the
// split_heads layout [B, H, S, head_dim] decoded to the compute dtype. A block's bytes are
// its values and its scales: copies (copy-on-write) and spills move both, never re-encoding.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mha/kv_cache_dtype.h"
#include "mha/status.h"

namespace at {
class Tensor;  // LibTorch stays out of this header: the serving layer holds caches (engine.h)
}  // namespace at

namespace mha {

class MhaModel;

struct KvPoolOptions {
  int64_t capacity_bytes = int64_t{256} << 20;  // keys + values (+ scales) of every block
  int64_t block_tokens = 16;                    // tokens per block (--kv-block-tokens)
  KvCacheDtype dtype = KvCacheDtype::kModel;    // how keys and values are stored (--kv-cache-dtype)
};

struct KvLayout;  // mha/kv_layout.h (LibTorch types): what one token of one sequence stores

class KvBlockPool {
 public:
  // A pool for `model`'s heads, in options.dtype (its compute dtype for kModel) on its device:
  // capacity_bytes / block_bytes() blocks, allocated at once (on the CPU the pages are touched
  // only as blocks are written). INVALID_ARGUMENT when block_tokens < 1 or not one block fits,
  // naming the numbers; FAILED_PRECONDITION for fp8_e4m3 where LibTorch or the device lacks it.
  static StatusOr<std::shared_ptr<KvBlockPool>> Create(const KvPoolOptions& options,
                                                       const MhaModel& model);
  // The same for any layout (a grouped-query model's K/V heads: LlamaAttentionStack::CreateKvPool).
  static StatusOr<std::shared_ptr<KvBlockPool>> Create(const KvPoolOptions& options,
                                                       const KvLayout& layout);

  // `count` free block ids, each with reference count 1, or RESOURCE_EXHAUSTED naming what was
  // asked and what is free. All or nothing: on failure no block is taken.
  StatusOr<std::vector<int64_t>> Allocate(int64_t count);
  // One more reference to each of `blocks` (live blocks: a fork shares its source's).
  void Share(const std::vector<int64_t>& blocks);
  // One reference less to each of `blocks`; a block whose count reaches 0 is free again.
  void Release(const std::vector<int64_t>& blocks);
  // Copies the keys and values (and scales) of every slot of block `from` into block `to`, as
  // bytes; counted in copies_on_write() (KvCache::Reserve's copy of a shared block is its only
  // caller).
  void CopyBlock(int64_t from, int64_t to);

  int64_t total_blocks() const { return total_blocks_; }
  int64_t used_blocks() const;      // live blocks, each counted once however many caches hold it
  int64_t shared_blocks() const;    // live blocks with reference count > 1
  int64_t copies_on_write() const;  // blocks copied by CopyBlock since the pool was made
  int64_t ref_count(int64_t block) const;                         // 0 for a free block
  int64_t SharedAmong(const std::vector<int64_t>& blocks) const;  // how many have count > 1
  int64_t free_blocks() const { return total_blocks_ - used_blocks(); }
  int64_t block_tokens() const { return block_tokens_; }
  int64_t block_bytes() const { return block_bytes_; }  // keys + values + scales of one block
  // 2 * H * D * the cache dtype's size, + 2 * H * 8 bytes of scales for a scaled dtype.
  int64_t bytes_per_token() const { return block_bytes_ / block_tokens_; }
  int64_t heads() const { return heads_; }        // heads stored per token
  int64_t head_dim() const { return head_dim_; }  // D
  // options.dtype resolved: kModel only for a compute dtype without a name of its own (float64).
  KvCacheDtype cache_dtype() const { return cache_dtype_; }
  bool scaled() const { return KvCacheDtypeScaled(cache_dtype_); }  // scales beside the values
  // What a reader gets: heads, head_dim, the model's compute dtype, the pool's device.
  const KvLayout& layout() const;

  // [total_blocks * block_tokens, H, head_dim] in the cache dtype; writers own disjoint slots
  // (their blocks).
  const at::Tensor& keys() const;
  const at::Tensor& values() const;
  // [total_blocks * block_tokens, H, 2] float32, each slot's (scale, zero) per head, for a scaled
  // dtype; undefined tensors otherwise.
  const at::Tensor& key_scales() const;
  const at::Tensor& value_scales() const;

 private:
  KvBlockPool() = default;
  // `heads_words` names the heads ("8 KV heads") in the error when not one block fits.
  static StatusOr<std::shared_ptr<KvBlockPool>> Make(const KvPoolOptions& options,
                                                     const KvLayout& layout,
                                                     const std::string& heads_words);

  int64_t total_blocks_ = 0;
  int64_t block_tokens_ = 0;
  int64_t block_bytes_ = 0;
  int64_t heads_ = 0, head_dim_ = 0;
  KvCacheDtype cache_dtype_ = KvCacheDtype::kModel;
  struct Storage;  // the tensors and the layout (kv_pool.cc)
  std::shared_ptr<Storage> storage_;
  mutable std::mutex mu_;
  std::vector<int64_t> free_;  // guarded by mu_; a stack: the last freed block is reused first
  std::vector<int32_t> refs_;  // guarded by mu_; per block: the caches holding it
  int64_t shared_ = 0;         // guarded by mu_; blocks with refs_ > 1
  int64_t copies_ = 0;         // guarded by mu_
};

class KvSpillStore;  // mha/kv_spill.h

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
  int64_t blocks_held() const;                // over every row (shared ones included)
  int64_t shared_blocks_held() const;         // those another cache holds too
  const KvBlockPool& pool() const { return *pool_; }
  // Blocks `extra` more tokens per row would take from the pool: new blocks, plus the copies of
  // the shared blocks those tokens would be written into; for a spilled cache, the restore too.
  int64_t BlocksNeeded(int64_t extra) const;

  // Row `row`'s block ids in order: position p lies in slot table(row)[p / block_tokens] *
  // block_tokens + p % block_tokens of the pool's keys() / values().
  const std::vector<int64_t>& table(int64_t row) const {
    return tables_.at(static_cast<size_t>(row));
  }

  // Makes room for `extra` more tokens per row: new blocks from the pool, and a private copy of
  // each shared block the tokens would be written into (copy-on-write), or RESOURCE_EXHAUSTED
  // with nothing taken. FAILED_PRECONDITION for a spilled cache (Restore first).
  Status Reserve(int64_t extra);
  // Appends k, v ([rows, T, H * head_dim], projected, before split_heads; any strides) at
  // positions length() .. length() + T - 1. Reserve(T) must have succeeded. Throws c10::Error on
  // misuse (a write into a shared block included). On the CPU each token's row is copied
  // straight into its slot of the page.
  void Append(const at::Tensor& k, const at::Tensor& v);
  // The cached keys / values in split_heads layout [rows, H, length(), head_dim], in the model's
  // compute dtype: one gather of whole blocks (one index per block), narrowed to length(), then
  // decoded from the cache dtype.
  at::Tensor Keys() const;
  at::Tensor Values() const;
  // Rollback of a failed step: forgets the tokens after `length` (its appends); their blocks
  // stay reserved for the retry. Not TruncateTo, which gives blocks back.
  void RollbackTo(int64_t length) { length_ = std::min(length_, length); }
  void Truncate(int64_t length) { RollbackTo(length); }  // the old name of RollbackTo
  // Gives every block back: the cache is empty (and may grow again). A spilled cache's bytes
  // leave the store.
  void Release();

  // A new cache of the first `tokens` tokens of every row (0 <= tokens <= length()), sharing the
  // ceil(tokens / block_tokens) blocks per row that hold them: it takes no block from the pool
  // until it writes (then at most one copy per row, Reserve). OUT_OF_RANGE naming the numbers
  // otherwise; FAILED_PRECONDITION for a spilled cache.
  StatusOr<std::unique_ptr<KvCache>> Fork(int64_t tokens) const;
  // Keeps the first `tokens` tokens of every row (0 <= tokens <= length(), else OUT_OF_RANGE
  // naming the numbers) and gives back every block past ceil(tokens / block_tokens) per row (a
  // shared one just loses this cache's reference): a speculative decoder's rewind.
  Status TruncateTo(int64_t tokens);

  // Copies the stored bytes of positions [begin, begin + count) of every row into `out`: the keys,
  // the values, then for a scaled pool their scales, each [rows, count, H, x] as the pool stores it
  // (rows * count * bytes_per_token() bytes; what a store outside the process keeps). OUT_OF_RANGE
  // past length(); FAILED_PRECONDITION when spilled.
  Status ExportStored(int64_t begin, int64_t count, void* out) const;
  // Appends `count` tokens per row from bytes ExportStored wrote on a pool of the same cache dtype
  // and heads, exactly (never re-encoded): blocks taken first (RESOURCE_EXHAUSTED with nothing
  // changed when the pool is short).
  Status ImportStored(const void* data, int64_t count);

  // Copies the tokens' bytes as the pool stores them (every row, length() of them: keys, values,
  // then for a scaled pool their scales; rows * length() * bytes_per_token() bytes) into `store`
  // under `key`, then gives every block back; length() stays. The store's
  // error (RESOURCE_EXHAUSTED over its bound) with nothing changed; FAILED_PRECONDITION when
  // spilled already. The cache keeps `store` until it is restored or released.
  Status Spill(std::shared_ptr<KvSpillStore> store, const std::string& key);
  // Takes blocks for the spilled tokens (RESOURCE_EXHAUSTED with nothing changed when the pool is
  // short: free room first), copies the bytes back exactly and removes them from the store.
  Status Restore();
  bool spilled() const { return spill_ != nullptr; }
  int64_t BlocksToRestore() const { return BlocksNeeded(0); }  // the blocks Restore takes
  int64_t spilled_bytes() const { return spill_ ? spill_->bytes : 0; }

 private:
  friend struct KvBatch;           // several caches' appends and gathers in one op (mha/kv_batch.h)
  friend class LlamaSessionCache;  // restores every layer from one allocation

  struct Spilled {
    std::shared_ptr<KvSpillStore> store;
    std::string key;
    int64_t bytes = 0;
  };
  // Restore with `blocks` (BlocksNeeded(0) of them, taken by the caller): given back on failure.
  Status RestoreWith(std::vector<int64_t> blocks);
  // Per row, the indices in its table of the shared blocks that `extra` more tokens land in.
  std::vector<std::vector<size_t>> SharedTargets(int64_t extra) const;
  // Throws c10::Error when positions [length(), length() + count) of a row lie in a shared block.
  void CheckWritable(int64_t count) const;
  std::vector<int64_t> AllBlocks() const;

  // Slot ids of positions [begin, begin + count) of every row, row by row, appended to `out`.
  void SlotIds(int64_t begin, int64_t count, std::vector<int64_t>* out) const;
  // The same as a tensor: [rows * count], int64 on the pool's device.
  at::Tensor Slots(int64_t begin, int64_t count) const;
  // [rows, blocks, block_tokens, H, x] of `store` ([slots, H, x]): the rows' first `blocks` blocks.
  at::Tensor GatherBlocks(const at::Tensor& store, int64_t blocks) const;
  // The keys (or values) decoded, [rows, H, length(), head_dim].
  at::Tensor Gather(bool values) const;
  // CPU: x [rows, T, E] at positions [begin, begin + T) of every row, one memcpy per token (one
  // encode per token and head for int8).
  void WriteRows(const at::Tensor& x, const at::Tensor& store, const at::Tensor& scales,
                 int64_t begin) const;
  // Any device: x [rows, T, E] encoded by tensor ops and copied into the slots.
  void WriteIndexed(const at::Tensor& x, const at::Tensor& store, const at::Tensor& scales,
                    int64_t begin) const;

  std::shared_ptr<KvBlockPool> pool_;
  int64_t rows_ = 0;
  int64_t length_ = 0;
  std::vector<std::vector<int64_t>> tables_;  // per row: its block ids in order
  std::unique_ptr<Spilled> spill_;            // while spilled (tables_ empty)
};

}  // namespace mha
