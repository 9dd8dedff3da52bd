#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <string>

#include "kv/kv_quant.h"
#include "mha/kv_cache.h"
#include "mha/kv_layout.h"
#include "mha/model.h"

namespace mha {

namespace {

constexpr int64_t kScaleBytes = 2 * sizeof(float);  // a (scale, zero) pair per token and head

}  // namespace

struct KvBlockPool::Storage {
  at::Tensor keys, values, key_scales, value_scales;
  KvLayout layout;  // the compute dtype: what readers get
};

const at::Tensor& KvBlockPool::keys() const { return storage_->keys; }
const at::Tensor& KvBlockPool::values() const { return storage_->values; }
const at::Tensor& KvBlockPool::key_scales() const { return storage_->key_scales; }
const at::Tensor& KvBlockPool::value_scales() const { return storage_->value_scales; }
const KvLayout& KvBlockPool::layout() const { return storage_->layout; }

StatusOr<std::shared_ptr<KvBlockPool>> KvBlockPool::Create(const KvPoolOptions& options,
                                                           const MhaModel& model) {
  const MhaOptions& o = model.options();
  const at::Tensor& reference = model.weights().out_weight;
  const KvLayout layout{o.num_heads, o.head_dim(), reference.scalar_type(), reference.device()};
  return Make(options, layout, std::to_string(o.num_heads) + " heads");
}

StatusOr<std::shared_ptr<KvBlockPool>> KvBlockPool::Create(const KvPoolOptions& options,
                                                           const KvLayout& layout) {
  if (layout.heads < 1 || layout.head_dim < 1) {
    return InvalidArgument("KV cache layout: heads and head_dim must be >= 1, got " +
                           std::to_string(layout.heads) + " and " +
                           std::to_string(layout.head_dim));
  }
  return Make(options, layout, std::to_string(layout.heads) + " KV heads");
}

StatusOr<std::shared_ptr<KvBlockPool>> KvBlockPool::Make(const KvPoolOptions& options,
                                                         const KvLayout& layout,
                                                         const std::string& heads_words) {
  if (options.block_tokens < 1) {
    return InvalidArgument("--kv-block-tokens must be >= 1, got " +
                           std::to_string(options.block_tokens));
  }
  auto storage = internal::KvStorageType(options.dtype, layout.dtype, layout.device.is_cuda());
  if (!storage.ok()) return storage.status();
  const KvCacheDtype dtype = internal::KvDtypeOf(*storage);
  const int64_t element = static_cast<int64_t>(c10::elementSize(*storage));
  const int64_t per_head =
      layout.head_dim * element + (KvCacheDtypeScaled(dtype) ? kScaleBytes : 0);
  const int64_t block_bytes = 2 * options.block_tokens * layout.heads * per_head;
  if (options.capacity_bytes < block_bytes) {
    return InvalidArgument(
        "--kv-cache-bytes " + std::to_string(options.capacity_bytes) +
        " holds no block: one block of " + std::to_string(options.block_tokens) + " tokens takes " +
        std::to_string(block_bytes) + " bytes (2 * " + heads_words + " * " +
        (KvCacheDtypeScaled(dtype)
             ? "(head_dim " + std::to_string(layout.head_dim) + " * " + std::to_string(element) +
                   " + 8 bytes of scale and zero)"
             : "head_dim " + std::to_string(layout.head_dim) + " * " + std::to_string(element)) +
        " bytes per token, KV cache dtype " + KvCacheDtypeName(dtype) + ")");
  }
  std::shared_ptr<KvBlockPool> pool(new KvBlockPool());
  pool->total_blocks_ = options.capacity_bytes / block_bytes;
  pool->block_tokens_ = options.block_tokens;
  pool->block_bytes_ = block_bytes;
  pool->heads_ = layout.heads;
  pool->head_dim_ = layout.head_dim;
  pool->cache_dtype_ = dtype;
  try {
    c10::InferenceMode guard;  // steps write in place under InferenceMode
    const auto opts = at::TensorOptions().dtype(*storage).device(layout.device);
    const int64_t slots = pool->total_blocks_ * pool->block_tokens_;
    pool->storage_ = std::make_shared<Storage>();
    Storage& s = *pool->storage_;
    s.layout = layout;
    s.keys = at::empty({slots, layout.heads, layout.head_dim}, opts);
    s.values = at::empty({slots, layout.heads, layout.head_dim}, opts);
    if (pool->scaled()) {
      s.key_scales = at::empty({slots, layout.heads, 2}, opts.dtype(at::kFloat));
      s.value_scales = at::empty({slots, layout.heads, 2}, opts.dtype(at::kFloat));
    }
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
    for (const at::Tensor* store : {&keys(), &values(), &key_scales(), &value_scales()}) {
      if (!store->defined()) continue;  // no scales
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

}  // namespace mha
