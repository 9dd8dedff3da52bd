#include "attention/paged_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "attention/kv_pages.h"
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

// The next block's bytes of the unit's K/V heads, fetched in parts as the current block is
// computed (a burst of every line at once fills the core's miss buffers and waits): `rows` rows of
// `span` bytes, `stride` bytes apart (one row of every byte when the heads are the whole row).
struct Ahead {
  const char* next = nullptr;
  int64_t rows = 0, span = 0, stride = 0;
  // Part i of `parts` of the block.
  MHA_INLINE void Part(int64_t i, int64_t parts) const {
    const int64_t bytes = rows * span, end = bytes * (i + 1) / parts;
    for (int64_t b = bytes * i / parts & ~int64_t{63}; b < end; b += 64) {
      __builtin_prefetch(next + b / span * stride + b % span);
    }
  }
};

MHA_INLINE Ahead AheadOf(const Unit& u, const Pages& pages, const void* store, int64_t slot,
                         int64_t rows) {
  Ahead a;
  a.stride = pages.kv_embed * pages.element;
  a.span = (u.kv_end - u.kv_begin) * pages.head_dim * pages.element;
  a.next = static_cast<const char*>(store) + slot * a.stride +
           u.kv_begin * pages.head_dim * pages.element;
  a.rows = rows;
  if (a.span == a.stride) a.rows = 1, a.span = rows * a.stride;  // one contiguous run
  return a;
}

// Calls f(first position, rows, the block's first slot, the next block) for every block of u's
// row holding positions [0, count).
template <typename F>
MHA_INLINE void ForEachBlock(const Unit& u, const Pages& pages, const void* store, int64_t count,
                             F&& f) {
  const int64_t bt = pages.block_tokens;
  for (int64_t block = 0, p = 0; p < count; ++block, p += bt) {
    Ahead ahead;
    if (p + bt < count) {
      ahead = AheadOf(u, pages, store, (*u.table)[static_cast<size_t>(block + 1)] * bt,
                      std::min(bt, count - p - bt));
    }
    f(p, std::min(bt, count - p), (*u.table)[static_cast<size_t>(block)] * bt, ahead);
  }
}

// Rows of K/V head `kv` of a block as floats: `rows` with `stride` floats between rows.
struct Rows {
  const float* rows;
  int64_t stride;
};

// `n` rows of K/V head `kv` from slot `first` on of `store` (its slots' scales in `scales`): where
// they lie for float32 pages, else decoded into buf ([n, D]).
template <PageType P>
MHA_INLINE Rows BlockRows(const Pages& pages, const void* store, const float* scales, int64_t first,
                          int64_t n, int64_t kv, float* buf) {
  const int64_t d = pages.head_dim, e = pages.kv_embed, kv_heads = pages.kv_heads();
  if constexpr (P == PageType::kFloat32) {
    return {static_cast<const float*>(store) + first * e + kv * d, e};
  } else {
    for (int64_t r = 0; r < n; ++r) {
      const int64_t at = (first + r) * e + kv * d;
      if constexpr (P == PageType::kInt8) {
        DecodeInt8(static_cast<const int8_t*>(store) + at,
                   scales + ((first + r) * kv_heads + kv) * 2, d, buf + r * d);
      } else if constexpr (P == PageType::kBFloat16) {
        DecodeBf16(static_cast<const uint16_t*>(store) + at, d, buf + r * d);
      } else {
        DecodeHalf(static_cast<const uint16_t*>(store) + at, d, buf + r * d);
      }
    }
    return {buf, d};
  }
}

// scores[t, h, p] = (q_t * scale) . k_p[h / group] for every visible key p and the unit's query
// heads h (h counted from the unit's first), block by block: a K/V head's rows of the block decoded
// (if need be) once, then met by every query head of its group while they are in L1.
template <PageType P>
MHA_INLINE void Scores(const Unit& u, const Pages& pages, const float* q, float* scores,
                       float* buf) {
  const int64_t d = pages.head_dim, s = u.keys, g = pages.group;
  const int64_t heads = (u.kv_end - u.kv_begin) * g, q_row = heads * d;
  ForEachBlock(u, pages, pages.keys, u.Visible(u.tokens - 1),
               [&](int64_t p, int64_t n, int64_t first, const Ahead& ahead) MHA_LAMBDA_INLINE {
                 for (int64_t kv = u.kv_begin; kv < u.kv_end; ++kv) {
                   ahead.Part(kv - u.kv_begin, u.kv_end - u.kv_begin);
                   const Rows k =
                       BlockRows<P>(pages, pages.keys, pages.key_scales, first, n, kv, buf);
                   for (int64_t t = 0; t < u.tokens; ++t) {
                     const int64_t rows = std::min(n, u.Visible(t) - p);
                     for (int64_t h = (kv - u.kv_begin) * g;
                          rows > 0 && h < (kv - u.kv_begin + 1) * g; ++h) {
                       DotRows(q + t * q_row + h * d, k.rows, k.stride, rows, d,
                               scores + (t * heads + h) * s + p);
                     }
                   }
                 }
               });
}

// out[t, h*D:(h+1)*D] = sum over visible p of probs[t, h, p] * v_p[h / group] for the unit's query
// heads, block by block as Scores.
template <PageType P>
MHA_INLINE void Mix(const Unit& u, const Pages& pages, const float* probs, float* buf) {
  const int64_t d = pages.head_dim, s = u.keys, g = pages.group;
  const int64_t heads = (u.kv_end - u.kv_begin) * g, col = u.kv_begin * g * d;
  for (int64_t t = 0; t < u.tokens; ++t) {
    std::fill(u.out + t * pages.embed + col, u.out + t * pages.embed + col + heads * d, 0.0f);
  }
  ForEachBlock(u, pages, pages.values, u.Visible(u.tokens - 1),
               [&](int64_t p, int64_t n, int64_t first, const Ahead& ahead) MHA_LAMBDA_INLINE {
                 for (int64_t kv = u.kv_begin; kv < u.kv_end; ++kv) {
                   ahead.Part(kv - u.kv_begin, u.kv_end - u.kv_begin);
                   const Rows v =
                       BlockRows<P>(pages, pages.values, pages.value_scales, first, n, kv, buf);
                   for (int64_t t = 0; t < u.tokens; ++t) {
                     const int64_t rows = std::min(n, u.Visible(t) - p);
                     for (int64_t h = (kv - u.kv_begin) * g;
                          rows > 0 && h < (kv - u.kv_begin + 1) * g; ++h) {
                       MixRows(probs + (t * heads + h) * s + p, v.rows, v.stride, rows, d,
                               u.out + t * pages.embed + col + h * d);
                     }
                   }
                 }
               });
  // sum_p w_p (v_p + b) = sum_p w_p v_p + b: each row's weights sum to 1.
  if (u.v_bias) {
    for (int64_t t = 0; t < u.tokens; ++t) {
      float* row = u.out + t * pages.embed + col;
      for (int64_t i = 0; i < heads * d; ++i) row[i] += u.v_bias[col + i];
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
MHA_INLINE void Softmax(const Unit& u, int64_t heads, float* scores) {
  const int64_t s = u.keys;
  for (int64_t t = 0; t < u.tokens; ++t) {
    const int64_t n = u.Visible(t);
    for (int64_t h = 0; h < heads; ++h) {
      float* row = scores + (t * heads + h) * s;
      const float inv = 1.0f / ExpRowSum(row, n, RowMax(row, n));
      for (int64_t p = 0; p < n; ++p) row[p] *= inv;
      std::fill(row + n, row + s, 0.0f);
    }
  }
}

template <PageType P>
MHA_INLINE void Attend(const Unit& u, const Pages& pages, Scratch* scratch) {
  const int64_t d = pages.head_dim, heads = (u.kv_end - u.kv_begin) * pages.group;
  const int64_t q_row = heads * d, col = u.kv_begin * pages.group * d;
  scratch->q.resize(static_cast<size_t>(std::max<int64_t>(u.tokens * q_row, 1)));
  scratch->scores.resize(static_cast<size_t>(std::max<int64_t>(u.tokens * heads * u.keys, 1)));
  scratch->rows.resize(static_cast<size_t>(P == PageType::kFloat32 ? 1 : pages.block_tokens * d));
  // PyTorch's order: the query scaled by 1/sqrt(D) before it meets the keys.
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  for (int64_t t = 0; t < u.tokens; ++t) {
    const float* src = u.q + t * u.q_stride + col;
    float* dst = scratch->q.data() + t * q_row;
    if (u.q_bias) {
      for (int64_t i = 0; i < q_row; ++i) dst[i] = (src[i] + u.q_bias[col + i]) * scale;
    } else {
      for (int64_t i = 0; i < q_row; ++i) dst[i] = src[i] * scale;
    }
  }
  Scores<P>(u, pages, scratch->q.data(), scratch->scores.data(), scratch->rows.data());
  Softmax(u, heads, scratch->scores.data());
  Mix<P>(u, pages, scratch->scores.data(), scratch->rows.data());
}

}  // namespace

MHA_CPU_CLONES void AttendUnit(const Unit& u, const Pages& pages, Scratch* scratch) {
  switch (pages.type) {
    case PageType::kFloat32:
      return Attend<PageType::kFloat32>(u, pages, scratch);
    case PageType::kBFloat16:
      return Attend<PageType::kBFloat16>(u, pages, scratch);
    case PageType::kFloat16:
      return Attend<PageType::kFloat16>(u, pages, scratch);
    case PageType::kInt8:
      return Attend<PageType::kInt8>(u, pages, scratch);
  }
}

}  // namespace mha::internal
