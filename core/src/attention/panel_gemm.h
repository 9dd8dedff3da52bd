// Private to mha_core: a float32 GEMM over weights laid out once at load, for the packed pass
// (core/src/attention/packed_attention.h). OpenBLAS packs both operands on every call (it has no
// pre-packed GEMM): at c=32 that is ~4 MiB of weights copied per pass. Here the weights are stored
// as the kernel reads them, panels of 16 output columns [K, 16] one after the other, and x is read
// where it lies: nothing is copied. Where the CPU has AVX-512, 8 x 32 tiles (two panels, 16
// accumulators of 16 floats); elsewhere 6 x 16 tiles (12 accumulators of 8 floats) built for
// x86-64-v3 and the baseline, picked at load (as paged_kernel.cc). K in chunks of 512, rows in
// blocks that keep x's chunk in L2.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace mha::internal {

constexpr int64_t kPanelWidth = 16;
// Up to this many rows (B·T) the panel GEMM on one thread beat OpenBLAS on two in wall time
// (mha_core_bench BM_Forward, E=512, this 2-core box: 16 rows 0.34 vs 0.57 ms, 64 rows 1.35 vs
// 1.6-2.4 ms; 256 rows a tie): such passes take it whatever the BLAS threads.
constexpr int64_t kPanelRowsAnyThreads = 64;

// w_t [K, M] (x times it gives [N, M]), M a multiple of kPanelWidth: [M / 16, K, 16] contiguous.
at::Tensor PackPanels(const at::Tensor& w_t);

// c [N, M] = x [N, K] (rows `ldx` floats apart) times the panels of PackPanels (+ bias [M], or
// null); c's rows M floats apart. Overwrites c.
void PanelGemm(const float* x, int64_t ldx, int64_t n, int64_t k, const float* panels, int64_t m,
               const float* bias, float* c);

// x [N, in] times a transposed weight w_t [in, out] (+ bias [out]): at::linear of the weight.
// Over `panels` (PackPanels(w_t)) when given and the pass takes them, as the packed pass does: a
// float32 x on the CPU and one BLAS thread, or at most kPanelRowsAnyThreads rows; then nothing is
// packed per call. Else addmm / mm over w_t (OpenBLAS packs it per call).
at::Tensor LinearT(const at::Tensor& x, const at::Tensor& w_t, const at::Tensor& bias,
                   const at::Tensor& panels = at::Tensor());

// Tests only: false makes PanelGemm run its 8-float form (x86-64-v3 / baseline) even where the
// CPU has AVX-512 (there it runs 8 x 32 tiles of 16-float vectors); true restores the default.
void AllowWidePanelGemm(bool allow);

}  // namespace mha::internal
