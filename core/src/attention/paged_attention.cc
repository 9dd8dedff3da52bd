#include "mha/paged_attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "attention/paged_kernel.h"

namespace mha {
namespace {

using internal::Pages;
using internal::Scratch;
using internal::Unit;

// Units split into contiguous runs of about equal work, one run per thread.
void RunUnits(const std::vector<Unit>& units, const Pages& pages) {
  constexpr int64_t kMinWorkPerThread = int64_t{1} << 20;  // key/value floats read
  std::vector<int64_t> work;
  int64_t total = 0;
  for (const Unit& u : units) work.push_back(total += u.keys * u.tokens * pages.kv_embed + 1);
  const int64_t runs = std::clamp<int64_t>(total / kMinWorkPerThread, 1, at::get_num_threads());
  std::vector<size_t> bounds{0};
  for (int64_t r = 1; r < runs; ++r) {
    const int64_t target = total * r / runs;
    bounds.push_back(
        static_cast<size_t>(std::lower_bound(work.begin(), work.end(), target) - work.begin()));
  }
  bounds.push_back(units.size());
  at::parallel_for(0, runs, 1, [&](int64_t begin, int64_t end) {
    thread_local Scratch scratch;
    for (int64_t r = begin; r < end; ++r) {
      for (size_t i = bounds[r]; i < bounds[r + 1]; ++i)
        internal::AttendUnit(units[i], pages, &scratch);
    }
  });
}

}  // namespace

bool PagedPoolSupported(const KvBlockPool& pool) {
  return pool.keys().is_cpu() && pool.keys().scalar_type() == at::kFloat;
}

bool PagedAttentionApplies(const MhaModel& model, const std::vector<StepItem>& items) {
  const MhaOptions& o = model.options();
  if (o.add_bias_kv || o.add_zero_attn || items.empty()) return false;
  const KvBlockPool& pool = items.front().cache->pool();
  if (!PagedPoolSupported(pool)) return false;
  for (const StepItem& item : items) {
    const StepInputs& in = *item.inputs;
    if (&item.cache->pool() != &pool || in.query.size(1) > kMaxPagedTokens || in.need_weights ||
        in.key_padding_mask.defined() || in.attn_mask.defined()) {
      return false;
    }
  }
  return true;
}

at::Tensor PagedAttention(const MhaModel& model, const std::vector<StepItem>& items,
                          const at::Tensor& q_all) {
  std::vector<PagedItem> paged;
  paged.reserve(items.size());
  for (const StepItem& item : items) {
    paged.push_back(PagedItem{item.cache, item.inputs->query.size(1), !item.cross});
  }
  return PagedAttention(items.front().cache->pool(), model.options().num_heads, paged, q_all);
}

at::Tensor PagedAttention(const KvBlockPool& pool, int64_t query_heads,
                          const std::vector<PagedItem>& items, const at::Tensor& q_all) {
  const int64_t kv_heads = pool.heads(), d = pool.head_dim(), e = query_heads * d;
  TORCH_CHECK(PagedPoolSupported(pool), "PagedAttention: float32 CPU pages");
  TORCH_CHECK(query_heads % kv_heads == 0, "PagedAttention: ", query_heads,
              " query heads for pages of ", kv_heads, " heads");
  TORCH_CHECK(q_all.scalar_type() == at::kFloat && q_all.is_cpu() && q_all.dim() == 2 &&
                  q_all.size(1) == e && q_all.stride(1) == 1,
              "PagedAttention: float32 CPU queries [N, ", e, "] with unit column stride, got ",
              q_all.sizes());
  const Pages pages{pool.keys().data_ptr<float>(),
                    pool.values().data_ptr<float>(),
                    pool.block_tokens(),
                    e,
                    query_heads,
                    d,
                    kv_heads * d,
                    query_heads / kv_heads};
  at::Tensor out = at::empty({q_all.size(0), e}, q_all.options());
  std::vector<Unit> units;
  int64_t offset = 0;
  for (const PagedItem& item : items) {
    const KvCache& cache = *item.cache;
    TORCH_CHECK(&cache.pool() == &pool, "PagedAttention: items from different pools");
    for (int64_t r = 0; r < cache.rows(); ++r, offset += item.tokens) {
      TORCH_CHECK(offset + item.tokens <= q_all.size(0), "PagedAttention: more rows than the ",
                  q_all.size(0), " queries");
      units.push_back(Unit{&cache.table(r), cache.length(), item.tokens, item.causal,
                           q_all.data_ptr<float>() + offset * q_all.stride(0), q_all.stride(0),
                           out.data_ptr<float>() + offset * e});
    }
  }
  TORCH_CHECK(offset == q_all.size(0), "PagedAttention: ", offset, " query rows expected, got ",
              q_all.size(0));
  RunUnits(units, pages);
  return out;
}

}  // namespace mha
