#include "mha/kv_cache.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "mha/device_stream.h"
#include "mha/kv_layout.h"
#include "mha/kv_spill.h"
#include "mha/model.h"

namespace mha {

struct KvBlockPool::Storage {
  at::Tensor keys, values;
};

const at::Tensor& KvBlockPool::keys() const { return storage_->keys; }
const at::Tensor& KvBlockPool::values() const { return storage_->values; }

StatusOr<std::shared_ptr<KvBlockPool>> KvBlockPool::Create(const KvPoolOptions& options,
                                                           const MhaModel& model) {
  const MhaOptions& o = model.options();
  const at::Tensor& reference = model.weights().out_weight;
  const KvLayout layout{o.num_heads, o.head_dim(), reference.scalar_type(), reference.device()};
  return Make(options, layout,
              "2 * E=" + std::to_string(o.embed_dim) + " * " +
                  std::to_string(reference.element_size()) + " bytes per token");
}

StatusOr<std::shared_ptr<KvBlockPool>> KvBlockPool::Create(const KvPoolOptions& options,
                                                           const KvLayout& layout) {
  if (layout.heads < 1 || layout.head_dim < 1) {
    return InvalidArgument("KV cache layout: heads and head_dim must be >= 1, got " +
                           std::to_string(layout.heads) + " and " +
                           std::to_string(layout.head_dim));
  }
  return Make(options, layout,
              "2 * " + std::to_string(layout.heads) + " KV heads * head_dim " +
                  std::to_string(layout.head_dim) + " * " +
                  std::to_string(c10::elementSize(layout.dtype)) + " bytes per token");
}

StatusOr<std::shared_ptr<KvBlockPool>> KvBlockPool::Make(const KvPoolOptions& options,
                                                         const KvLayout& layout,
                                                         const std::string& per_token) {
  if (options.block_tokens < 1) {
    return InvalidArgument("--kv-block-tokens must be >= 1, got " +
                           std::to_string(options.block_tokens));
  }
  const int64_t element = static_cast<int64_t>(c10::elementSize(layout.dtype));
  const int64_t block_bytes = 2 * options.block_tokens * layout.heads * layout.head_dim * element;
  if (options.capacity_bytes < block_bytes) {
    return InvalidArgument("--kv-cache-bytes " + std::to_string(options.capacity_bytes) +
                           " holds no block: one block of " + std::to_string(options.block_tokens) +
                           " tokens takes " + std::to_string(block_bytes) + " bytes (" + per_token +
                           ")");
  }
  std::shared_ptr<KvBlockPool> pool(new KvBlockPool());
  pool->total_blocks_ = options.capacity_bytes / block_bytes;
  pool->block_tokens_ = options.block_tokens;
  pool->block_bytes_ = block_bytes;
  pool->heads_ = layout.heads;
  pool->head_dim_ = layout.head_dim;
  try {
    c10::InferenceMode guard;  // steps write in place under InferenceMode
    const auto opts = at::TensorOptions().dtype(layout.dtype).device(layout.device);
    const int64_t slots = pool->total_blocks_ * pool->block_tokens_;
    pool->storage_ = std::make_shared<Storage>();
    pool->storage_->keys = at::empty({slots, layout.heads, layout.head_dim}, opts);
    pool->storage_->values = at::empty({slots, layout.heads, layout.head_dim}, opts);
  } catch (const c10::Error& e) {
    return ResourceExhausted("allocating the KV cache pool of " +
                             std::to_string(options.capacity_bytes) + " bytes on " +
                             layout.device.str() + " failed: " + e.what_without_backtrace());
  }
  pool->refs_.assign(static_cast<size_t>(pool->total_blocks_), 0);
  pool->free_.reserve(static_cast<size_t>(pool->total_blocks_));
  for (int64_t b = pool->total_blocks_ - 1; b >= 0; --b) pool->free_.push_back(b);
  return pool;
}

StatusOr<std::vector<int64_t>> KvBlockPool::Allocate(int64_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t available = static_cast<int64_t>(free_.size());
  if (count > available) {
    return ResourceExhausted("KV cache full: " + std::to_string(count) + " blocks needed, " +
                             std::to_string(available) + " of " + std::to_string(total_blocks_) +
                             " free (" + std::to_string(block_tokens_) + " tokens, " +
                             std::to_string(block_bytes_) + " bytes each; --kv-cache-bytes)");
  }
  std::vector<int64_t> blocks(free_.end() - count, free_.end());
  free_.resize(free_.size() - static_cast<size_t>(count));
  for (int64_t b : blocks) refs_[static_cast<size_t>(b)] = 1;
  return blocks;
}

void KvBlockPool::Share(const std::vector<int64_t>& blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int64_t b : blocks) {
    int32_t& refs = refs_.at(static_cast<size_t>(b));
    TORCH_CHECK(refs > 0, "KvBlockPool::Share: block ", b, " is free");
    if (++refs == 2) ++shared_;
  }
}

void KvBlockPool::Release(const std::vector<int64_t>& blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int64_t b : blocks) {
    int32_t& refs = refs_[static_cast<size_t>(b)];
    if (refs <= 0) continue;  // never live: nothing to give back (a bug upstream, not a crash here)
    if (--refs == 1) --shared_;
    if (refs == 0) free_.push_back(b);
  }
}

void KvBlockPool::CopyBlock(int64_t from, int64_t to) {
  {
    c10::InferenceMode guard;  // the pool's tensors are inference tensors (written in place)
    for (const at::Tensor* store : {&keys(), &values()}) {
      store->narrow(0, to * block_tokens_, block_tokens_)
          .copy_(store->narrow(0, from * block_tokens_, block_tokens_));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++copies_;
}

int64_t KvBlockPool::shared_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shared_;
}

int64_t KvBlockPool::copies_on_write() const {
  std::lock_guard<std::mutex> lock(mu_);
  return copies_;
}

int64_t KvBlockPool::ref_count(int64_t block) const {
  std::lock_guard<std::mutex> lock(mu_);
  return refs_.at(static_cast<size_t>(block));
}

int64_t KvBlockPool::SharedAmong(const std::vector<int64_t>& blocks) const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (int64_t b : blocks) n += refs_.at(static_cast<size_t>(b)) > 1 ? 1 : 0;
  return n;
}

int64_t KvBlockPool::used_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_blocks_ - static_cast<int64_t>(free_.size());
}

KvCache::KvCache(std::shared_ptr<KvBlockPool> pool, int64_t rows)
    : pool_(std::move(pool)), rows_(rows), tables_(static_cast<size_t>(rows)) {}

KvCache::~KvCache() { Release(); }

int64_t KvCache::blocks_held() const {
  int64_t n = 0;
  for (const auto& table : tables_) n += static_cast<int64_t>(table.size());
  return n;
}

int64_t KvCache::BlocksNeeded(int64_t extra) const {
  const int64_t bt = pool_->block_tokens();
  const int64_t want = (length_ + std::max<int64_t>(0, extra) + bt - 1) / bt;
  if (spilled()) return want * rows_;
  int64_t n = 0;
  for (const auto& table : tables_) {
    n += std::max<int64_t>(0, want - static_cast<int64_t>(table.size()));
  }
  for (const auto& row : SharedTargets(extra)) n += static_cast<int64_t>(row.size());
  return n;
}

Status KvCache::Reserve(int64_t extra) {
  if (spilled()) {
    return FailedPrecondition("the KV cache is spilled (key '" + spill_->key +
                              "'): restore it before a step");
  }
  const std::vector<std::vector<size_t>> shared = SharedTargets(extra);
  const int64_t bt = pool_->block_tokens();
  const int64_t want = (length_ + extra + bt - 1) / bt;
  int64_t needed = 0;
  for (size_t r = 0; r < tables_.size(); ++r) {
    needed += static_cast<int64_t>(shared[r].size()) +
              std::max<int64_t>(0, want - static_cast<int64_t>(tables_[r].size()));
  }
  if (needed == 0) return Status::Ok();
  auto blocks = pool_->Allocate(needed);
  if (!blocks.ok()) return blocks.status();
  auto next = blocks->begin();
  std::vector<int64_t> dropped;  // this cache's references to the shared blocks it copied
  for (size_t r = 0; r < tables_.size(); ++r) {
    std::vector<int64_t>& table = tables_[r];
    for (size_t j : shared[r]) {
      pool_->CopyBlock(table[j], *next);
      dropped.push_back(table[j]);
      table[j] = *next++;
    }
    while (static_cast<int64_t>(table.size()) < want) table.push_back(*next++);
  }
  pool_->Release(dropped);
  return Status::Ok();
}

void KvCache::SlotIds(int64_t begin, int64_t count, std::vector<int64_t>* out) const {
  const int64_t bt = pool_->block_tokens();
  for (const auto& table : tables_) {
    for (int64_t p = begin; p < begin + count; ++p) {
      out->push_back(table.at(static_cast<size_t>(p / bt)) * bt + p % bt);
    }
  }
}

at::Tensor KvCache::Slots(int64_t begin, int64_t count) const {
  std::vector<int64_t> slots;
  slots.reserve(static_cast<size_t>(rows_ * count));
  SlotIds(begin, count, &slots);
  return IdsToDevice(slots, pool_->keys().device());
}

void KvCache::Append(const at::Tensor& k, const at::Tensor& v) {
  const int64_t t = k.size(1);
  TORCH_CHECK(k.size(0) == rows_ && v.size(0) == rows_, "KvCache::Append: ", k.size(0),
              " rows for a cache of ", rows_);
  CheckWritable(t);
  c10::InferenceMode guard;  // the pool's tensors are inference tensors (written in place)
  const at::Tensor& keys = pool_->keys();
  if (keys.is_cpu()) {
    WriteRows(k, keys, length_);
    WriteRows(v, pool_->values(), length_);
  } else {
    const at::Tensor slots = Slots(length_, t);
    const int64_t h = keys.size(1), d = keys.size(2);
    keys.index_copy_(0, slots, k.reshape({rows_ * t, h, d}).to(keys.scalar_type()));
    pool_->values().index_copy_(0, slots, v.reshape({rows_ * t, h, d}).to(keys.scalar_type()));
  }
  length_ += t;
}

void KvCache::WriteRows(const at::Tensor& x, const at::Tensor& store, int64_t begin) const {
  const int64_t e = store.size(1) * store.size(2), t = x.size(1);
  TORCH_CHECK(x.dim() == 3 && x.size(2) == e, "KvCache::Append: rows of ", e, " expected, got ",
              x.sizes());
  at::Tensor src = x.to(store.device(), store.scalar_type());
  if (src.stride(2) != 1) src = src.contiguous();
  const int64_t element = static_cast<int64_t>(src.element_size()), bt = pool_->block_tokens();
  const char* base = static_cast<const char*>(src.data_ptr());
  char* pages = static_cast<char*>(store.data_ptr());
  for (int64_t r = 0; r < rows_; ++r) {
    const std::vector<int64_t>& table = tables_[static_cast<size_t>(r)];
    for (int64_t i = 0; i < t; ++i) {
      const int64_t p = begin + i, slot = table.at(static_cast<size_t>(p / bt)) * bt + p % bt;
      std::memcpy(pages + slot * e * element,
                  base + (r * src.stride(0) + i * src.stride(1)) * element,
                  static_cast<size_t>(e * element));
    }
  }
}

at::Tensor KvCache::Gather(const at::Tensor& store) const {
  c10::InferenceMode guard;
  const int64_t bt = pool_->block_tokens(), h = store.size(1), d = store.size(2);
  const int64_t blocks = (length_ + bt - 1) / bt;
  std::vector<int64_t> ids;
  ids.reserve(static_cast<size_t>(rows_ * blocks));
  for (const auto& table : tables_) {
    for (int64_t j = 0; j < blocks; ++j) ids.push_back(table.at(static_cast<size_t>(j)));
  }
  const at::Tensor index = IdsToDevice(ids, store.device());
  const at::Tensor pages = store.view({-1, bt, h, d}).index_select(0, index);  // [rows*n, bt, H, D]
  return pages.view({rows_, blocks * bt, h, d}).narrow(1, 0, length_).transpose(1, 2);
}

at::Tensor KvCache::Keys() const { return Gather(pool_->keys()); }
at::Tensor KvCache::Values() const { return Gather(pool_->values()); }

void KvCache::Release() {
  if (!pool_) return;
  if (spill_) {
    spill_->store->Remove(spill_->key);
    spill_.reset();
  }
  const std::vector<int64_t> all = AllBlocks();
  for (auto& table : tables_) table.clear();
  if (!all.empty()) pool_->Release(all);
  length_ = 0;
}

}  // namespace mha
