#include "mha/kv_batch.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <limits>

#include "kv/kv_quant.h"
#include "mha/device_stream.h"
#include "mha/kv_layout.h"

namespace mha {
namespace {

const KvBlockPool& PoolOf(const std::vector<const KvCache*>& caches) {
  TORCH_CHECK(!caches.empty(), "KvBatch: no caches");
  const KvBlockPool& pool = caches.front()->pool();
  for (const KvCache* c : caches) {
    TORCH_CHECK(&c->pool() == &pool, "KvBatch: caches from different pools");
  }
  return pool;
}

}  // namespace

void KvBatch::Append(const std::vector<KvCache*>& caches, const at::Tensor& k,
                     const at::Tensor& v) {
  const std::vector<const KvCache*> all(caches.begin(), caches.end());
  const KvBlockPool& pool = PoolOf(all);
  const at::Tensor& keys = pool.keys();
  const int64_t t = k.size(1);
  int64_t rows = 0;
  for (const KvCache* c : caches) rows += c->rows();
  TORCH_CHECK(k.dim() == 3 && k.size(0) == rows && v.size(0) == rows && v.size(1) == t,
              "KvBatch::Append: ", rows, " rows of the caches, got keys ", k.sizes(), " values ",
              v.sizes());
  for (const KvCache* c : caches) c->CheckWritable(t);  // never into a shared block
  c10::InferenceMode guard;  // the pool's tensors are inference tensors (written in place)
  std::vector<int64_t> slots;
  slots.reserve(static_cast<size_t>(rows * t));
  for (const KvCache* c : caches) c->SlotIds(c->length_, t, &slots);
  const at::Tensor ids = IdsToDevice(slots, keys.device());
  const int64_t h = keys.size(1), d = keys.size(2);
  auto write = [&](const at::Tensor& x, const at::Tensor& store, const at::Tensor& scales) {
    const internal::EncodedKv encoded =
        internal::EncodeKv(x.reshape({rows * t, h, d}).to(store.device()), store.scalar_type());
    store.index_copy_(0, ids, encoded.codes);
    if (scales.defined()) scales.index_copy_(0, ids, encoded.scales);
  };
  write(k, keys, pool.key_scales());
  write(v, pool.values(), pool.value_scales());
  for (KvCache* c : caches) c->length_ += t;
}

KvBatch::Padded KvBatch::Gather(const std::vector<const KvCache*>& caches) {
  const KvBlockPool& pool = PoolOf(caches);
  c10::InferenceMode guard;
  const int64_t bt = pool.block_tokens(), h = pool.heads();
  Padded out;
  int64_t rows = 0;
  for (const KvCache* c : caches) {
    rows += c->rows();
    out.longest = std::max(out.longest, c->length_);
  }
  const int64_t blocks = std::max<int64_t>(1, (out.longest + bt - 1) / bt);
  // One host tensor, one copy: every row's first `blocks` block ids (a short row repeats its
  // last block, or block 0 when it has none: those positions are zeroed below), then the rows'
  // lengths.
  std::vector<int64_t> ids;
  ids.reserve(static_cast<size_t>(rows * (blocks + 1)));
  for (const KvCache* c : caches) {
    for (const auto& table : c->tables_) {
      const int64_t held = (c->length_ + bt - 1) / bt;
      for (int64_t j = 0; j < blocks; ++j) {
        ids.push_back(held == 0 ? 0 : table.at(static_cast<size_t>(std::min(j, held - 1))));
      }
    }
  }
  for (const KvCache* c : caches) ids.insert(ids.end(), static_cast<size_t>(c->rows()), c->length_);
  const at::Tensor all = IdsToDevice(ids, pool.keys().device());
  const at::Tensor index = all.narrow(0, 0, rows * blocks);
  out.lengths = all.narrow(0, rows * blocks, rows);
  const at::Tensor pos = at::arange(out.longest, out.lengths.options());
  const at::Tensor past = (pos.unsqueeze(0) >= out.lengths.unsqueeze(1)).view({rows, 1, -1, 1});
  auto tokens = [&](const at::Tensor& store) {  // [rows, longest, H, x] as stored
    const int64_t x = store.size(2);
    return store.view({-1, bt, h, x})
        .index_select(0, index)  // [rows * blocks, bt, H, x]
        .view({rows, blocks * bt, h, x})
        .narrow(1, 0, out.longest);
  };
  auto gather = [&](const at::Tensor& store, const at::Tensor& scales) {
    const at::Tensor decoded = internal::DecodeKv(
        tokens(store), scales.defined() ? tokens(scales) : at::Tensor(), pool.layout().dtype);
    // In place on a fresh tensor (the gather's, or the decode's).
    return decoded.transpose(1, 2).masked_fill_(past, 0);
  };
  out.keys = gather(pool.keys(), pool.key_scales());
  out.values = gather(pool.values(), pool.value_scales());
  return out;
}

at::Tensor KvBatch::PaddingMask(const Padded& padded, int64_t keys,
                                const at::TensorOptions& options) {
  const at::Tensor pos = at::arange(keys, padded.lengths.options()).unsqueeze(0);
  const at::Tensor hidden = (pos >= padded.lengths.unsqueeze(1)) & (pos < padded.longest);
  return at::zeros(hidden.sizes(), options)
      .masked_fill(hidden, -std::numeric_limits<double>::infinity())
      .view({hidden.size(0), 1, 1, keys});
}

bool KvBatch::PaddingFits(int64_t rows, int64_t longest, int64_t real, int64_t bytes_per_token) {
  constexpr int64_t kSmallBytes = int64_t{64} << 20;
  const int64_t padded = rows * longest;
  return padded <= 2 * real || padded * bytes_per_token <= kSmallBytes;
}

}  // namespace mha
