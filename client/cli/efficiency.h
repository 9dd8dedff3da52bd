// Efficiency of a served request (docs/performance.md): its attention FLOPs against the server's
// CPU time per request, at one core's fp32 matmul rate measured in the same process run.
#pragma once

#include <cstdint>

#include "client/bench/bench_runner.h"

namespace mha::client::cli {

// FLOPs of one multi-head attention forward pass (2 per multiply-add): the q and out projections
// 2*B*T*E^2 each, k and v 2*B*S*E*kdim and 2*B*S*E*vdim, the scores and the weighted sum
// 2*B*T*S*E each. Self-attention (S = T, kdim = vdim = E): 8*B*T*E^2 + 4*B*T^2*E.
double AttentionFlops(int64_t batch, int64_t seq, int64_t kv_seq, int64_t embed, int64_t kdim,
                      int64_t vdim);

// One core's fp32 matmul rate in FLOPs per CPU second of this process: [512, 512] x [512, 512]
// repeated for at least `seconds`, with BLAS (OpenBLAS's own pool when present) and ATen at one
// thread, the previous thread counts restored after.
double MeasureMatmulFlopsPerCpuSecond(double seconds = 0.5);

// Fills flops_per_request, matmul_flops_per_s and efficiency when the CPU was measured.
void FillEfficiency(ServerCpuReport* report, double flops_per_request, double matmul_rate);

}  // namespace mha::client::cli
