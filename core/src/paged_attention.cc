#include "mha/paged_attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace mha {
namespace {

// The pool as raw pages: slot s of a block-ordered store is s * kv_embed floats in. Queries and
// outputs have `heads` heads (embed = heads * head_dim floats per token); the pages kv_heads, a
// divisor of heads: query head h reads K/V head h / group (group = heads / kv_heads).
struct Pages {
  const float* keys = nullptr;
  const float* values = nullptr;
  int64_t block_tokens = 0, embed = 0, heads = 0, head_dim = 0, kv_embed = 0, group = 1;
};

// One sequence of one item: its new tokens' queries against its cached keys.
struct Unit {
  const std::vector<int64_t>* table = nullptr;  // the row's block ids in order
  int64_t keys = 0;                             // S: tokens cached (the step's included)
  int64_t tokens = 0;                           // T: new tokens (queries)
  bool causal = false;                          // token t sees keys [0, S - T + 1 + t)
  const float* q = nullptr;                     // token t's query at q + t * q_stride
  int64_t q_stride = 0;
  float* out = nullptr;  // [T, E] contiguous: combine_heads rows
  int64_t Visible(int64_t t) const { return causal ? keys - tokens + 1 + t : keys; }
};

// Per thread, grown to the largest step seen and reused: scaled queries [T, E] and scores
// [T, H, S].
struct Scratch {
  std::vector<float> q, scores;
};

inline float Dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // eight lanes: the compiler vectorizes the body
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

inline void Axpy(float w, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += w * x[i];
}

// Calls f(position, row of the store) for positions [0, count) of `u`'s row, block by block.
template <typename F>
void ForEachSlot(const Unit& u, const Pages& pages, const float* store, int64_t count, F&& f) {
  const int64_t bt = pages.block_tokens, e = pages.kv_embed;
  for (int64_t block = 0, p = 0; p < count; ++block) {
    const float* base = store + (*u.table)[static_cast<size_t>(block)] * bt * e;
    const int64_t n = std::min(bt, count - p);
    for (int64_t i = 0; i < n; ++i, ++p) f(p, base + i * e);
  }
}

// scores[t, h, p] = (q_t * scale) . k_p for every visible key p: one pass over the key rows.
void Scores(const Unit& u, const Pages& pages, const float* q, float* scores) {
  const int64_t h_n = pages.heads, d = pages.head_dim, s = u.keys, t_n = u.tokens, g = pages.group;
  const int64_t first = u.Visible(0);  // every token sees keys [0, first)
  ForEachSlot(u, pages, pages.keys, s, [&](int64_t p, const float* k) {
    for (int64_t t = p < first ? 0 : p - first + 1; t < t_n; ++t) {
      const float* qt = q + t * pages.embed;
      float* row = scores + t * h_n * s + p;
      for (int64_t h = 0; h < h_n; ++h) row[h * s] = Dot(qt + h * d, k + h / g * d, d);
    }
  });
}

// Each (t, h) row of scores over its visible keys becomes its softmax.
void Softmax(const Unit& u, const Pages& pages, float* scores) {
  const int64_t s = u.keys;
  for (int64_t t = 0; t < u.tokens; ++t) {
    const int64_t n = u.Visible(t);
    for (int64_t h = 0; h < pages.heads; ++h) {
      float* row = scores + (t * pages.heads + h) * s;
      const float top = *std::max_element(row, row + n);
      float sum = 0;
      for (int64_t p = 0; p < n; ++p) sum += (row[p] = std::exp(row[p] - top));
      const float inv = 1.0f / sum;
      for (int64_t p = 0; p < n; ++p) row[p] *= inv;
    }
  }
}

// out[t, h*D:(h+1)*D] = sum over visible p of probs[t, h, p] * v_p[h]: one pass over the values.
void Mix(const Unit& u, const Pages& pages, const float* probs) {
  const int64_t h_n = pages.heads, d = pages.head_dim, s = u.keys, e = pages.embed, g = pages.group;
  std::fill(u.out, u.out + u.tokens * e, 0.0f);
  const int64_t first = u.Visible(0);
  ForEachSlot(u, pages, pages.values, s, [&](int64_t p, const float* v) {
    for (int64_t t = p < first ? 0 : p - first + 1; t < u.tokens; ++t) {
      const float* w = probs + t * h_n * s + p;
      float* out = u.out + t * e;
      for (int64_t h = 0; h < h_n; ++h) Axpy(w[h * s], v + h / g * d, out + h * d, d);
    }
  });
}

void Attend(const Unit& u, const Pages& pages, Scratch* scratch) {
  const int64_t e = pages.embed;
  scratch->q.resize(static_cast<size_t>(std::max<int64_t>(u.tokens * e, 1)));
  scratch->scores.resize(
      static_cast<size_t>(std::max<int64_t>(u.tokens * pages.heads * u.keys, 1)));
  // PyTorch's order: the query scaled by 1/sqrt(D) before it meets the keys.
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(pages.head_dim)));
  for (int64_t t = 0; t < u.tokens; ++t) {
    const float* src = u.q + t * u.q_stride;
    float* dst = scratch->q.data() + t * e;
    for (int64_t i = 0; i < e; ++i) dst[i] = src[i] * scale;
  }
  Scores(u, pages, scratch->q.data(), scratch->scores.data());
  Softmax(u, pages, scratch->scores.data());
  Mix(u, pages, scratch->scores.data());
}

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
      for (size_t i = bounds[r]; i < bounds[r + 1]; ++i) Attend(units[i], pages, &scratch);
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
