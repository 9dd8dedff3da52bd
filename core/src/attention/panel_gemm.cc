#include "attention/panel_gemm.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>

#include "attention/simd.h"
#include "mha/runtime.h"

// The AVX-512 form (WideGemm) where GCC can build it for x86-64 (simd.h).
#define MHA_GEMM_WIDE MHA_SIMD_X86_GCC

namespace mha::internal {
namespace {

constexpr int64_t kRows = 6;                // rows of a tile
constexpr int64_t kDepth = 512;             // K per chunk: a panel's chunk is 32 KiB
constexpr int64_t kBlockBytes = 384 << 10;  // x's chunk of one block of rows, kept in L2

// c[0..R) x [0, 16) (ldc apart) = `init` (bias row, or c itself when null) + x[0..R) x p, over kc.
template <int R>
MHA_INLINE void Tile(const float* x, int64_t ldx, const float* p, int64_t kc, const float* init,
                     float* c, int64_t ldc) {
  V8 acc[R][2];
  for (int r = 0; r < R; ++r) {
    const float* from = init ? init : c + r * ldc;
    acc[r][0] = MHA_LD(from), acc[r][1] = MHA_LD(from + 8);
  }
  for (int64_t k = 0; k < kc; ++k) {
    const V8 b0 = MHA_LD(p + k * kPanelWidth), b1 = MHA_LD(p + k * kPanelWidth + 8);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float a = x[r * ldx + k];
      acc[r][0] += a * b0;
      acc[r][1] += a * b1;
    }
  }
  for (int r = 0; r < R; ++r) MHA_ST(c + r * ldc, acc[r][0]), MHA_ST(c + r * ldc + 8, acc[r][1]);
}

// The last `rows` (< kRows) rows of a panel's chunk: one tile of that height.
template <int R>
MHA_INLINE void TailTile(int64_t rows, const float* x, int64_t ldx, const float* p, int64_t kc,
                         const float* init, float* c, int64_t ldc) {
  if constexpr (R > 0) {
    if (rows == R) return Tile<R>(x, ldx, p, kc, init, c, ldc);
    TailTile<R - 1>(rows, x, ldx, p, kc, init, c, ldc);
  }
}

// Rows [0, n) of one panel's chunk: full tiles, then the rest.
MHA_INLINE void PanelRows(const float* x, int64_t ldx, int64_t n, const float* p, int64_t kc,
                          const float* init, float* c, int64_t ldc) {
  int64_t i = 0;
  for (; i + kRows <= n; i += kRows) Tile<kRows>(x + i * ldx, ldx, p, kc, init, c + i * ldc, ldc);
  TailTile<kRows - 1>(n - i, x + i * ldx, ldx, p, kc, init, c + i * ldc, ldc);
}

#if MHA_GEMM_WIDE
typedef float V16 __attribute__((vector_size(64)));
typedef float V16u __attribute__((vector_size(64), aligned(4), may_alias));
#define MHA_LD16(p) (*reinterpret_cast<const V16u*>(p))
#define MHA_ST16(p, x) (*reinterpret_cast<V16u*>(p) = (x))

constexpr int64_t kWideRows = 8;  // 8 rows x 2 panels: 16 accumulators of 16 floats

// Tile's AVX-512 form: R rows x P panels (`stride` floats apart) of 16 columns.
template <int R, int P>
MHA_V4 MHA_INLINE void WideTile(const float* x, int64_t ldx, const float* p, int64_t stride,
                                int64_t kc, const float* init, float* c, int64_t ldc) {
  V16 acc[R][P];
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < P; ++q) acc[r][q] = MHA_LD16(init ? init + 16 * q : c + r * ldc + 16 * q);
  }
  for (int64_t k = 0; k < kc; ++k) {
    V16 b[P];
    for (int q = 0; q < P; ++q) b[q] = MHA_LD16(p + q * stride + k * kPanelWidth);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float a = x[r * ldx + k];
      for (int q = 0; q < P; ++q) acc[r][q] += a * b[q];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < P; ++q) MHA_ST16(c + r * ldc + 16 * q, acc[r][q]);
  }
}

// The last `rows` (< kWideRows) rows: one wide tile of that height.
template <int R, int P>
MHA_V4 MHA_INLINE void WideTailTile(int64_t rows, const float* x, int64_t ldx, const float* p,
                                    int64_t stride, int64_t kc, const float* init, float* c,
                                    int64_t ldc) {
  if constexpr (R > 0) {
    if (rows == R) return WideTile<R, P>(x, ldx, p, stride, kc, init, c, ldc);
    WideTailTile<R - 1, P>(rows, x, ldx, p, stride, kc, init, c, ldc);
  }
}

template <int P>
MHA_V4 MHA_INLINE void WideRows(const float* x, int64_t ldx, int64_t n, const float* p,
                                int64_t stride, int64_t kc, const float* init, float* c,
                                int64_t ldc) {
  int64_t i = 0;
  for (; i + kWideRows <= n; i += kWideRows) {
    WideTile<kWideRows, P>(x + i * ldx, ldx, p, stride, kc, init, c + i * ldc, ldc);
  }
  WideTailTile<kWideRows - 1, P>(n - i, x + i * ldx, ldx, p, stride, kc, init, c + i * ldc, ldc);
}

// PanelGemm with AVX-512: two panels at a time (the last alone when their number is odd).
MHA_V4 void WideGemm(const float* x, int64_t ldx, int64_t n, int64_t k, const float* panels,
                     int64_t m, const float* bias, float* c) {
  static const float kZeros[2 * kPanelWidth] = {};
  const int64_t depth = std::min(k, kDepth), count = m / kPanelWidth, stride = k * kPanelWidth;
  const int64_t block =
      std::max<int64_t>(kWideRows, kBlockBytes / (depth * static_cast<int64_t>(sizeof(float))) /
                                       kWideRows * kWideRows);
  for (int64_t i0 = 0; i0 < n; i0 += block) {
    const int64_t rows = std::min(block, n - i0);
    for (int64_t k0 = 0; k0 < k; k0 += kDepth) {
      const int64_t kc = std::min(kDepth, k - k0);
      for (int64_t j = 0; j < count; j += 2) {
        const float* init = k0 > 0 ? nullptr : bias ? bias + j * kPanelWidth : kZeros;
        const float* p = panels + j * stride + k0 * kPanelWidth;
        float* cj = c + i0 * m + j * kPanelWidth;
        if (j + 1 < count) {
          WideRows<2>(x + i0 * ldx + k0, ldx, rows, p, stride, kc, init, cj, m);
        } else {
          WideRows<1>(x + i0 * ldx + k0, ldx, rows, p, stride, kc, init, cj, m);
        }
      }
    }
  }
}
#endif

}  // namespace

at::Tensor PackPanels(const at::Tensor& w_t) {
  const int64_t k = w_t.size(0), m = w_t.size(1);
  return w_t.reshape({k, m / kPanelWidth, kPanelWidth}).permute({1, 0, 2}).contiguous();
}

namespace {

std::atomic<bool> g_allow_wide{true};

MHA_CPU_CLONES void NarrowGemm(const float* x, int64_t ldx, int64_t n, int64_t k,
                               const float* panels, int64_t m, const float* bias, float* c) {
  static const float kZeros[kPanelWidth] = {};
  const int64_t depth = std::min(k, kDepth);
  const int64_t block = std::max<int64_t>(
      kRows, kBlockBytes / (depth * static_cast<int64_t>(sizeof(float))) / kRows * kRows);
  for (int64_t i0 = 0; i0 < n; i0 += block) {
    const int64_t rows = std::min(block, n - i0);
    for (int64_t k0 = 0; k0 < k; k0 += kDepth) {
      const int64_t kc = std::min(kDepth, k - k0);
      for (int64_t j = 0; j < m / kPanelWidth; ++j) {
        const float* init = k0 > 0 ? nullptr : bias ? bias + j * kPanelWidth : kZeros;
        PanelRows(x + i0 * ldx + k0, ldx, rows, panels + (j * k + k0) * kPanelWidth, kc, init,
                  c + i0 * m + j * kPanelWidth, m);
      }
    }
  }
}

}  // namespace

void AllowWidePanelGemm(bool allow) { g_allow_wide.store(allow); }

void PanelGemm(const float* x, int64_t ldx, int64_t n, int64_t k, const float* panels, int64_t m,
               const float* bias, float* c) {
#if MHA_GEMM_WIDE
  static const bool wide = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
  if (wide && g_allow_wide.load(std::memory_order_relaxed)) {
    return WideGemm(x, ldx, n, k, panels, m, bias, c);
  }
#endif
  NarrowGemm(x, ldx, n, k, panels, m, bias, c);
}

at::Tensor LinearT(const at::Tensor& x, const at::Tensor& w_t, const at::Tensor& bias,
                   const at::Tensor& panels) {
  if (panels.defined() && x.is_cpu() && x.scalar_type() == at::kFloat &&
      (BlasThreads() == 1 || x.size(0) <= kPanelRowsAnyThreads)) {
    const at::Tensor xc = x.contiguous();
    const int64_t n = xc.size(0), k = xc.size(1), m = w_t.size(1);
    at::Tensor out = at::empty({n, m}, xc.options());
    PanelGemm(xc.data_ptr<float>(), k, n, k, panels.data_ptr<float>(), m,
              bias.defined() ? bias.data_ptr<float>() : nullptr, out.data_ptr<float>());
    return out;
  }
  return bias.defined() ? at::addmm(bias, x, w_t) : at::mm(x, w_t);
}

}  // namespace mha::internal
