#include "client/cli/efficiency.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <ctime>

#include "mha/runtime.h"

namespace mha::client::cli {
namespace {

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

double AttentionFlops(int64_t batch, int64_t seq, int64_t kv_seq, int64_t embed, int64_t kdim,
                      int64_t vdim) {
  const double b = static_cast<double>(batch), t = static_cast<double>(seq);
  const double s = static_cast<double>(kv_seq > 0 ? kv_seq : seq), e = static_cast<double>(embed);
  const double kd = static_cast<double>(kdim > 0 ? kdim : embed);
  const double vd = static_cast<double>(vdim > 0 ? vdim : embed);
  return 2 * b * t * e * e * 2 + 2 * b * s * e * kd + 2 * b * s * e * vd + 4 * b * t * s * e;
}

double MeasureMatmulFlopsPerCpuSecond(double seconds) {
  const int blas_threads = BlasThreads();  // its own pool: at::set_num_threads does not reach it
  const int aten_threads = at::get_num_threads();
  SetBlasThreads(1);
  at::set_num_threads(1);
  constexpr int64_t n = 512;
  const at::Tensor a = at::rand({n, n});
  const at::Tensor b = at::rand({n, n});
  at::Tensor c = at::empty({n, n});
  for (int i = 0; i < 3; ++i) at::mm_out(c, a, b);  // first use: packing buffers, page faults
  int64_t passes = 0;
  const double start = ProcessCpuSeconds();
  double used = 0;
  while (used < seconds) {
    for (int i = 0; i < 8; ++i) at::mm_out(c, a, b);
    passes += 8;
    used = ProcessCpuSeconds() - start;
  }
  if (blas_threads > 0) SetBlasThreads(blas_threads);
  at::set_num_threads(aten_threads);
  return used > 0 ? 2.0 * n * n * n * static_cast<double>(passes) / used : 0;
}

void FillEfficiency(ServerCpuReport* r, double flops_per_request, double matmul_rate) {
  r->flops_per_request = flops_per_request;
  r->matmul_flops_per_s = matmul_rate;
  if (!r->measured || r->cpu_us_per_request <= 0 || matmul_rate <= 0) return;
  r->efficiency = flops_per_request / matmul_rate / (r->cpu_us_per_request * 1e-6);
}

}  // namespace mha::client::cli
