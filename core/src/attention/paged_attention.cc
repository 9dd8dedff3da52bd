#include "mha/paged_attention.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "attention/paged_kernel.h"
#include "attention/task_pool.h"
#include "mha/kv_layout.h"
#include "mha/runtime.h"

namespace mha {
namespace {

using internal::Pages;
using internal::PageType;
using internal::Scratch;
using internal::Unit;

Pages PagesOf(const KvBlockPool& pool, int64_t query_heads) {
  Pages pages;
  pages.keys = pool.keys().data_ptr();
  pages.values = pool.values().data_ptr();
  switch (pool.keys().scalar_type()) {
    case at::kBFloat16:
      pages.type = PageType::kBFloat16;
      break;
    case at::kHalf:
      pages.type = PageType::kFloat16;
      break;
    case at::kChar:
      pages.type = PageType::kInt8;
      pages.key_scales = pool.key_scales().data_ptr<float>();
      pages.value_scales = pool.value_scales().data_ptr<float>();
      break;
    default:
      pages.type = PageType::kFloat32;
      break;
  }
  pages.element = static_cast<int64_t>(pool.keys().element_size());
  pages.block_tokens = pool.block_tokens();
  pages.head_dim = pool.head_dim();
  pages.embed = query_heads * pool.head_dim();
  pages.heads = query_heads;
  pages.kv_embed = pool.heads() * pool.head_dim();
  pages.group = query_heads / pool.heads();
  return pages;
}

// Every unit (a sequence, all its K/V heads) attended, on PassThreads() threads when the pass is
// big enough to share: then each unit is split into its K/V heads, tasks a shared counter hands
// out. Each (sequence, K/V head) is computed whole by one thread with the same arithmetic as the
// one-thread pass, so the answer is the same bit for bit however many threads run it.
void RunUnits(const std::vector<Unit>& units, const Pages& pages) {
  constexpr int64_t kMinWorkPerThread = int64_t{1} << 20;  // key/value values read
  int64_t work = 0;
  for (const Unit& u : units) work += u.keys * u.tokens * pages.kv_embed + 1;
  const int threads = static_cast<int>(
      std::clamp<int64_t>(work / kMinWorkPerThread, 1, std::max(1, PassThreads())));
  if (threads == 1) {
    thread_local Scratch scratch;
    for (const Unit& u : units) internal::AttendUnit(u, pages, &scratch);
    return;
  }
  std::vector<Unit> tasks;
  tasks.reserve(units.size() * static_cast<size_t>(pages.kv_heads()));
  for (const Unit& u : units) {
    for (int64_t kv = u.kv_begin; kv < u.kv_end; ++kv) {
      tasks.push_back(u);
      tasks.back().kv_begin = kv;
      tasks.back().kv_end = kv + 1;
    }
  }
  internal::RunTasks(threads, static_cast<int64_t>(tasks.size()), [&](int64_t i) {
    thread_local Scratch scratch;
    internal::AttendUnit(tasks[static_cast<size_t>(i)], pages, &scratch);
  });
}

}  // namespace

bool PagedPoolSupported(const KvBlockPool& pool) {
  if (!pool.keys().is_cpu() || pool.layout().dtype != at::kFloat) return false;
  const at::ScalarType stored = pool.keys().scalar_type();
  return stored == at::kFloat || stored == at::kBFloat16 || stored == at::kHalf ||
         stored == at::kChar;
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
  TORCH_CHECK(PagedPoolSupported(pool), "PagedAttention: CPU pages of a float32 model");
  TORCH_CHECK(query_heads % kv_heads == 0, "PagedAttention: ", query_heads,
              " query heads for pages of ", kv_heads, " heads");
  TORCH_CHECK(q_all.scalar_type() == at::kFloat && q_all.is_cpu() && q_all.dim() == 2 &&
                  q_all.size(1) == e && q_all.stride(1) == 1,
              "PagedAttention: float32 CPU queries [N, ", e, "] with unit column stride, got ",
              q_all.sizes());
  const Pages pages = PagesOf(pool, query_heads);
  at::Tensor out = at::empty({q_all.size(0), e}, q_all.options());
  std::vector<Unit> units;
  int64_t offset = 0;
  for (const PagedItem& item : items) {
    const KvCache& cache = *item.cache;
    TORCH_CHECK(&cache.pool() == &pool, "PagedAttention: items from different pools");
    for (int64_t r = 0; r < cache.rows(); ++r, offset += item.tokens) {
      TORCH_CHECK(offset + item.tokens <= q_all.size(0), "PagedAttention: more rows than the ",
                  q_all.size(0), " queries");
      Unit u;
      u.table = &cache.table(r);
      u.keys = cache.length();
      u.tokens = item.tokens;
      u.causal = item.causal;
      u.q = q_all.data_ptr<float>() + offset * q_all.stride(0);
      u.q_stride = q_all.stride(0);
      u.out = out.data_ptr<float>() + offset * e;
      u.kv_begin = 0;
      u.kv_end = kv_heads;
      units.push_back(u);
    }
  }
  TORCH_CHECK(offset == q_all.size(0), "PagedAttention: ", offset, " query rows expected, got ",
              q_all.size(0));
  RunUnits(units, pages);
  return out;
}

}  // namespace mha
