#include "mha/kv_cache.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "kv/kv_quant.h"
#include "mha/device_stream.h"
#include "mha/kv_layout.h"
#include "mha/kv_spill.h"

namespace mha {

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
  const KvBlockPool& pool = *pool_;
  if (pool.keys().is_cpu()) {
    WriteRows(k, pool.keys(), pool.key_scales(), length_);
    WriteRows(v, pool.values(), pool.value_scales(), length_);
  } else {
    WriteIndexed(k, pool.keys(), pool.key_scales(), length_);
    WriteIndexed(v, pool.values(), pool.value_scales(), length_);
  }
  length_ += t;
}

void KvCache::WriteIndexed(const at::Tensor& x, const at::Tensor& store, const at::Tensor& scales,
                           int64_t begin) const {
  const int64_t t = x.size(1), h = store.size(1), d = store.size(2);
  const at::Tensor slots = Slots(begin, t);
  const internal::EncodedKv encoded =
      internal::EncodeKv(x.reshape({rows_ * t, h, d}), store.scalar_type());
  store.index_copy_(0, slots, encoded.codes);
  if (scales.defined()) scales.index_copy_(0, slots, encoded.scales);
}

void KvCache::WriteRows(const at::Tensor& x, const at::Tensor& store, const at::Tensor& scales,
                        int64_t begin) const {
  const int64_t h = store.size(1), d = store.size(2), e = h * d, t = x.size(1);
  TORCH_CHECK(x.dim() == 3 && x.size(2) == e, "KvCache::Append: rows of ", e, " expected, got ",
              x.sizes());
  const bool int8 = store.scalar_type() == at::kChar;
  at::Tensor src = x.to(store.device(), int8 ? at::kFloat : store.scalar_type());
  if (src.stride(2) != 1) src = src.contiguous();
  const int64_t element = static_cast<int64_t>(src.element_size()), bt = pool_->block_tokens();
  const char* base = static_cast<const char*>(src.data_ptr());
  char* pages = static_cast<char*>(store.data_ptr());
  for (int64_t r = 0; r < rows_; ++r) {
    const std::vector<int64_t>& table = tables_[static_cast<size_t>(r)];
    for (int64_t i = 0; i < t; ++i) {
      const int64_t p = begin + i, slot = table.at(static_cast<size_t>(p / bt)) * bt + p % bt;
      const char* row = base + (r * src.stride(0) + i * src.stride(1)) * element;
      if (int8) {
        internal::QuantizeTokenInt8(reinterpret_cast<const float*>(row), h, d,
                                    reinterpret_cast<int8_t*>(pages) + slot * e,
                                    scales.data_ptr<float>() + slot * h * 2);
      } else {
        std::memcpy(pages + slot * e * element, row, static_cast<size_t>(e * element));
      }
    }
  }
}

at::Tensor KvCache::GatherBlocks(const at::Tensor& store, int64_t blocks) const {
  const int64_t bt = pool_->block_tokens(), h = store.size(1), x = store.size(2);
  std::vector<int64_t> ids;
  ids.reserve(static_cast<size_t>(rows_ * blocks));
  for (const auto& table : tables_) {
    for (int64_t j = 0; j < blocks; ++j) ids.push_back(table.at(static_cast<size_t>(j)));
  }
  const at::Tensor index = IdsToDevice(ids, store.device());
  return store.view({-1, bt, h, x}).index_select(0, index).view({rows_, blocks, bt, h, x});
}

at::Tensor KvCache::Gather(bool values) const {
  c10::InferenceMode guard;
  const KvBlockPool& pool = *pool_;
  const int64_t bt = pool.block_tokens(), blocks = (length_ + bt - 1) / bt;
  auto tokens = [&](const at::Tensor& store) {  // [rows, length, H, x]
    return GatherBlocks(store, blocks).flatten(1, 2).narrow(1, 0, length_);
  };
  const at::Tensor& scales = values ? pool.value_scales() : pool.key_scales();
  const at::Tensor decoded =
      internal::DecodeKv(tokens(values ? pool.values() : pool.keys()),
                         scales.defined() ? tokens(scales) : at::Tensor(), pool.layout().dtype);
  return decoded.transpose(1, 2);
}

at::Tensor KvCache::Keys() const { return Gather(/*values=*/false); }
at::Tensor KvCache::Values() const { return Gather(/*values=*/true); }

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
