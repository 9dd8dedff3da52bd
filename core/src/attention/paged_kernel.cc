#include "attention/paged_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "attention/simd.h"

// AttendUnit twice (MHA_CPU_CLONES, simd.h): for x86-64-v3 and the baseline; the helpers below
// are inlined into each copy, so their 8-float vectors become one AVX register or two SSE ones.

namespace mha::internal {
namespace {

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

// The eight lane sums of acc[0..7], in order, into out[0..7]: three rounds of pairwise
// shuffles and adds instead of eight horizontal sums.
MHA_INLINE void Sums8(const V8* acc, float* out) {
  typedef int32_t M8 __attribute__((vector_size(32)));
  const M8 even = {0, 8, 2, 10, 4, 12, 6, 14}, odd = {1, 9, 3, 11, 5, 13, 7, 15};
  const M8 lo2 = {0, 1, 8, 9, 4, 5, 12, 13}, hi2 = {2, 3, 10, 11, 6, 7, 14, 15};
  const M8 lo4 = {0, 1, 2, 3, 8, 9, 10, 11}, hi4 = {4, 5, 6, 7, 12, 13, 14, 15};
  V8 t[4], u[2];
  for (int i = 0; i < 4; ++i) {
    t[i] = __builtin_shuffle(acc[2 * i], acc[2 * i + 1], even) +
           __builtin_shuffle(acc[2 * i], acc[2 * i + 1], odd);
  }
  for (int i = 0; i < 2; ++i) {
    u[i] = __builtin_shuffle(t[2 * i], t[2 * i + 1], lo2) +
           __builtin_shuffle(t[2 * i], t[2 * i + 1], hi2);
  }
  MHA_ST(out, __builtin_shuffle(u[0], u[1], lo4) + __builtin_shuffle(u[0], u[1], hi4));
}

// out[r] = q . rows[r] for `count` rows of a page, `stride` floats apart: eight rows at a time
// against each 8 floats of q (loaded once for the eight), the rest one by one.
MHA_INLINE void DotRows(const float* q, const float* rows, int64_t stride, int64_t count, int64_t d,
                        float* out) {
  int64_t r = 0;
  if (d % 8 == 0) {
    for (; r + 8 <= count; r += 8) {
      V8 acc[8] = {};
      const float* k = rows + r * stride;
      for (int64_t c = 0; c < d; c += 8) {
        const V8 qc = MHA_LD(q + c);
        for (int i = 0; i < 8; ++i) acc[i] += qc * MHA_LD(k + i * stride + c);
      }
      Sums8(acc, out + r);
    }
  }
  for (; r < count; ++r) out[r] = Dot(q, rows + r * stride, d);
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

// The next block's bytes, fetched in parts as the current block is computed (a burst of every
// line at once fills the core's miss buffers and waits).
struct Ahead {
  const char* next = nullptr;
  int64_t bytes = 0;
  // Part i of `parts` of the block.
  MHA_INLINE void Part(int64_t i, int64_t parts) const {
    const int64_t end = bytes * (i + 1) / parts;
    for (int64_t b = bytes * i / parts & ~int64_t{63}; b < end; b += 64) {
      __builtin_prefetch(next + b);
    }
  }
};

// Calls f(first position, rows, the block's first row in `store`, the next block) for every block
// of u's row holding positions [0, count).
template <typename F>
MHA_INLINE void ForEachBlock(const Unit& u, const Pages& pages, const float* store, int64_t count,
                             F&& f) {
  const int64_t bt = pages.block_tokens, e = pages.kv_embed;
  for (int64_t block = 0, p = 0; p < count; ++block, p += bt) {
    Ahead ahead;
    if (p + bt < count) {
      ahead.next = reinterpret_cast<const char*>(
          store + (*u.table)[static_cast<size_t>(block + 1)] * bt * e);
      ahead.bytes = std::min(bt, count - p - bt) * e * static_cast<int64_t>(sizeof(float));
    }
    const int64_t id = (*u.table)[static_cast<size_t>(block)];
    f(p, std::min(bt, count - p), store + id * bt * e, ahead);
  }
}

// scores[t, h, p] = (q_t * scale) . k_p[h / group] for every visible key p, block by block: the
// query heads of one K/V head one after the other while its rows of the block are in L1.
MHA_INLINE void Scores(const Unit& u, const Pages& pages, const float* q, float* scores) {
  const int64_t h_n = pages.heads, d = pages.head_dim, s = u.keys, g = pages.group;
  ForEachBlock(u, pages, pages.keys, u.Visible(u.tokens - 1),
               [&](int64_t p, int64_t n, const float* base, const Ahead& ahead) {
                 for (int64_t t = 0; t < u.tokens; ++t) {
                   const int64_t rows = std::min(n, u.Visible(t) - p);
                   if (rows <= 0) continue;
                   for (int64_t h = 0; h < h_n; ++h) {
                     if (t == 0) ahead.Part(h, h_n);
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
               [&](int64_t p, int64_t n, const float* base, const Ahead& ahead) {
                 for (int64_t t = 0; t < u.tokens; ++t) {
                   const int64_t rows = std::min(n, u.Visible(t) - p);
                   if (rows <= 0) continue;
                   for (int64_t h = 0; h < h_n; ++h) {
                     if (t == 0) ahead.Part(h, h_n);
                     MixRows(probs + (t * h_n + h) * s + p, base + h / g * d, pages.kv_embed, rows,
                             d, u.out + t * pages.embed + h * d);
                   }
                 }
               });
  // sum_p w_p (v_p + b) = sum_p w_p v_p + b: each row's weights sum to 1.
  if (u.v_bias) {
    for (int64_t t = 0; t < u.tokens; ++t) {
      float* row = u.out + t * pages.embed;
      for (int64_t i = 0; i < pages.embed; ++i) row[i] += u.v_bias[i];
    }
  }
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

// row[p] = exp(row[p] - top) for p < n, returning their sum. Eight lanes at a time by Cephes'
// expf (exp(x) = 2^k exp(r), |r| <= ln2 / 2, a degree-5 polynomial: within 2 ulp of expf, which is
// what at::softmax's vectorized exp gives too), the tail by std::exp.
MHA_INLINE float ExpRowSum(float* row, int64_t n, float top) {
  typedef int32_t I8 __attribute__((vector_size(32)));
  const V8 lowest = V8{} - 87.3365f;
  V8 acc = {};
  int64_t p = 0;
  for (; p + 8 <= n; p += 8) {
    V8 x = MHA_LD(row + p) - top;
    x = x > lowest ? x : lowest;  // below, exp underflows: e^-87.3 ~ 1.2e-38 stands for 0
    const V8 fx = x * 1.44269504088896341f + 0.5f;
    V8 k = __builtin_convertvector(__builtin_convertvector(fx, I8), V8);
    k += __builtin_convertvector(k > fx, V8);  // floor: truncation minus 1 where it rounded up
    x = x - k * 0.693359375f - k * -2.12194440e-4f;
    V8 y = x * 1.9875691500e-4f + 1.3981999507e-3f;
    y = y * x + 8.3334519073e-3f;
    y = y * x + 4.1665795894e-2f;
    y = y * x + 1.6666665459e-1f;
    y = y * x + 5.0000001201e-1f;
    y = y * (x * x) + x + 1.0f;
    const I8 bits = (__builtin_convertvector(k, I8) + 127) << 23;  // 2^k as a float's bits
    V8 two_k;
    __builtin_memcpy(&two_k, &bits, sizeof two_k);
    y *= two_k;
    MHA_ST(row + p, y);
    acc += y;
  }
  float lanes[8];
  MHA_ST(lanes, acc);
  float sum = Sum8(lanes);
  for (; p < n; ++p) sum += (row[p] = std::exp(row[p] - top));
  return sum;
}

// Each (t, h) row of scores over its visible keys becomes its softmax (keys past them: 0).
MHA_INLINE void Softmax(const Unit& u, const Pages& pages, float* scores) {
  const int64_t s = u.keys;
  for (int64_t t = 0; t < u.tokens; ++t) {
    const int64_t n = u.Visible(t);
    for (int64_t h = 0; h < pages.heads; ++h) {
      float* row = scores + (t * pages.heads + h) * s;
      const float inv = 1.0f / ExpRowSum(row, n, RowMax(row, n));
      for (int64_t p = 0; p < n; ++p) row[p] *= inv;
      std::fill(row + n, row + s, 0.0f);
    }
  }
}

}  // namespace

MHA_CPU_CLONES void AttendUnit(const Unit& u, const Pages& pages, Scratch* scratch) {
  const int64_t e = pages.embed;
  scratch->q.resize(static_cast<size_t>(std::max<int64_t>(u.tokens * e, 1)));
  scratch->scores.resize(
      static_cast<size_t>(std::max<int64_t>(u.tokens * pages.heads * u.keys, 1)));
  // PyTorch's order: the query scaled by 1/sqrt(D) before it meets the keys.
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(pages.head_dim)));
  for (int64_t t = 0; t < u.tokens; ++t) {
    const float* src = u.q + t * u.q_stride;
    float* dst = scratch->q.data() + t * e;
    if (u.q_bias) {
      for (int64_t i = 0; i < e; ++i) dst[i] = (src[i] + u.q_bias[i]) * scale;
    } else {
      for (int64_t i = 0; i < e; ++i) dst[i] = src[i] * scale;
    }
  }
  Scores(u, pages, scratch->q.data(), scratch->scores.data());
  Softmax(u, pages, scratch->scores.data());
  Mix(u, pages, scratch->scores.data());
}

}  // namespace mha::internal
