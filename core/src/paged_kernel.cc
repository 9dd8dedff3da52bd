#include "paged_kernel.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

// AttendUnit twice: for x86-64-v3 (AVX2, FMA) and the baseline, picked once by the loader (an
// ifunc); the helpers below are inlined into each copy, so their 8-float vectors become one AVX
// register or two SSE ones.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MHA_PAGED_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define MHA_PAGED_CLONES
#endif
#define MHA_INLINE inline __attribute__((always_inline))

namespace mha::internal {
namespace {

// Eight floats; V8u reads and writes them at any float alignment (a head's row within a page).
typedef float V8 __attribute__((vector_size(32)));
typedef float V8u __attribute__((vector_size(32), aligned(4), may_alias));
#define MHA_LD(p) (*reinterpret_cast<const V8u*>(p))
#define MHA_ST(p, x) (*reinterpret_cast<V8u*>(p) = (x))

MHA_INLINE float Sum8(const float* lanes) {
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

MHA_INLINE float Dot(const float* a, const float* b, int64_t n) {
  V8 acc0 = {}, acc1 = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 += MHA_LD(a + i) * MHA_LD(b + i);
    acc1 += MHA_LD(a + i + 8) * MHA_LD(b + i + 8);
  }
  for (; i + 8 <= n; i += 8) acc0 += MHA_LD(a + i) * MHA_LD(b + i);
  acc0 += acc1;
  float lanes[8];
  MHA_ST(lanes, acc0);
  float sum = Sum8(lanes);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// out[r] = q . rows[r] for `count` rows of a page, `stride` floats apart.
MHA_INLINE void DotRows(const float* q, const float* rows, int64_t stride, int64_t count, int64_t d,
                        float* out) {
  for (int64_t r = 0; r < count; ++r) out[r] = Dot(q, rows + r * stride, d);
}

// out[0, d) += sum over r < count of w[r] * rows[r][0, d): 32 output floats held in registers
// across the rows at a time.
MHA_INLINE void MixRows(const float* w, const float* rows, int64_t stride, int64_t count, int64_t d,
                        float* out) {
  int64_t c = 0;
  for (; c + 32 <= d; c += 32) {
    V8 a0 = MHA_LD(out + c), a1 = MHA_LD(out + c + 8), a2 = MHA_LD(out + c + 16),
       a3 = MHA_LD(out + c + 24);
    for (int64_t r = 0; r < count; ++r) {
      const float* v = rows + r * stride + c;
      a0 += w[r] * MHA_LD(v);
      a1 += w[r] * MHA_LD(v + 8);
      a2 += w[r] * MHA_LD(v + 16);
      a3 += w[r] * MHA_LD(v + 24);
    }
    MHA_ST(out + c, a0), MHA_ST(out + c + 8, a1), MHA_ST(out + c + 16, a2);
    MHA_ST(out + c + 24, a3);
  }
  for (; c + 8 <= d; c += 8) {
    V8 a = MHA_LD(out + c);
    for (int64_t r = 0; r < count; ++r) a += w[r] * MHA_LD(rows + r * stride + c);
    MHA_ST(out + c, a);
  }
  for (; c < d; ++c) {
    float a = out[c];
    for (int64_t r = 0; r < count; ++r) a += w[r] * rows[r * stride + c];
    out[c] = a;
  }
}

// Calls f(first position, rows, the block's first row in `store`) for every block of u's row
// holding positions [0, count).
template <typename F>
MHA_INLINE void ForEachBlock(const Unit& u, const Pages& pages, const float* store, int64_t count,
                             F&& f) {
  const int64_t bt = pages.block_tokens;
  for (int64_t block = 0, p = 0; p < count; ++block, p += bt) {
    const int64_t id = (*u.table)[static_cast<size_t>(block)];
    f(p, std::min(bt, count - p), store + id * bt * pages.kv_embed);
  }
}

// scores[t, h, p] = (q_t * scale) . k_p[h / group] for every visible key p, block by block: the
// query heads of one K/V head one after the other while its rows of the block are in L1.
MHA_INLINE void Scores(const Unit& u, const Pages& pages, const float* q, float* scores) {
  const int64_t h_n = pages.heads, d = pages.head_dim, s = u.keys, g = pages.group;
  ForEachBlock(u, pages, pages.keys, u.Visible(u.tokens - 1),
               [&](int64_t p, int64_t n, const float* base) {
                 for (int64_t t = 0; t < u.tokens; ++t) {
                   const int64_t rows = std::min(n, u.Visible(t) - p);
                   if (rows <= 0) continue;
                   for (int64_t h = 0; h < h_n; ++h) {
                     DotRows(q + t * pages.embed + h * d, base + h / g * d, pages.kv_embed, rows, d,
                             scores + (t * h_n + h) * s + p);
                   }
                 }
               });
}

// out[t, h*D:(h+1)*D] = sum over visible p of probs[t, h, p] * v_p[h / group], block by block.
MHA_INLINE void Mix(const Unit& u, const Pages& pages, const float* probs) {
  const int64_t h_n = pages.heads, d = pages.head_dim, s = u.keys, g = pages.group;
  std::fill(u.out, u.out + u.tokens * pages.embed, 0.0f);
  ForEachBlock(u, pages, pages.values, u.Visible(u.tokens - 1),
               [&](int64_t p, int64_t n, const float* base) {
                 for (int64_t t = 0; t < u.tokens; ++t) {
                   const int64_t rows = std::min(n, u.Visible(t) - p);
                   if (rows <= 0) continue;
                   for (int64_t h = 0; h < h_n; ++h) {
                     MixRows(probs + (t * h_n + h) * s + p, base + h / g * d, pages.kv_embed, rows,
                             d, u.out + t * pages.embed + h * d);
                   }
                 }
               });
}

MHA_INLINE float RowMax(const float* row, int64_t n) {
  float top = -std::numeric_limits<float>::infinity();
  int64_t p = 0;
  if (n >= 8) {
    V8 m = MHA_LD(row);
    for (p = 8; p + 8 <= n; p += 8) {
      const V8 x = MHA_LD(row + p);
      m = x > m ? x : m;
    }
    float lanes[8];
    MHA_ST(lanes, m);
    top = *std::max_element(lanes, lanes + 8);
  }
  for (; p < n; ++p) top = std::max(top, row[p]);
  return top;
}

MHA_INLINE float RowSum(const float* row, int64_t n) {
  V8 acc = {};
  int64_t p = 0;
  for (; p + 8 <= n; p += 8) acc += MHA_LD(row + p);
  float lanes[8];
  MHA_ST(lanes, acc);
  float sum = Sum8(lanes);
  for (; p < n; ++p) sum += row[p];
  return sum;
}

// Each (t, h) row of scores over its visible keys becomes its softmax (keys past them: 0). The
// exponentials in one ATen call for the unit (vectorized, as at::softmax's).
MHA_INLINE void Softmax(const Unit& u, const Pages& pages, float* scores) {
  const int64_t s = u.keys, rows = u.tokens * pages.heads;
  for (int64_t t = 0; t < u.tokens; ++t) {
    const int64_t n = u.Visible(t);
    for (int64_t h = 0; h < pages.heads; ++h) {
      float* row = scores + (t * pages.heads + h) * s;
      const float top = RowMax(row, n);
      for (int64_t p = 0; p < n; ++p) row[p] -= top;
      std::fill(row + n, row + s, -std::numeric_limits<float>::infinity());
    }
  }
  at::from_blob(scores, {rows * s}, at::TensorOptions().dtype(at::kFloat)).exp_();
  for (int64_t r = 0; r < rows; ++r) {
    float* row = scores + r * s;
    const float inv = 1.0f / RowSum(row, s);
    for (int64_t p = 0; p < s; ++p) row[p] *= inv;
  }
}

}  // namespace

MHA_PAGED_CLONES void AttendUnit(const Unit& u, const Pages& pages, Scratch* scratch) {
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

}  // namespace mha::internal
