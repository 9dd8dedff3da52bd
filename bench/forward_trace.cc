// Where a pass's time goes on a GPU, as a timeline (scripts/gpu-profile.sh runs it):
// passes of mha_core's Forward at MHA_BENCH_SHAPE / MHA_BENCH_DEVICE / MHA_BENCH_DTYPE under
// LibTorch's Kineto profiler (CPU ops, CUDA runtime calls, kernels), each pass inside a "pass"
// user scope, saved as a Chrome trace that bench/trace_passes.py reads (as it reads PyTorch's own,
// from bench/torch_gpu_profile.py --trace). Nsight Systems does not run on the lent machines.
//
//   mha_forward_trace OUT.json [synced|queued] [PASSES=20] [NEED_WEIGHTS=0]
//
// synced: each pass and a device synchronization inside its scope (what BM_Forward times);
// queued: passes back to back, one synchronization after the last (BM_ForwardQueued).
#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "bench_setup.h"

namespace {

namespace prof = torch::autograd::profiler;

int Run(const std::string& path, bool synced, int passes, bool need_weights) {
  const auto model = mha_bench::MakeModel(/*cuda_graphs=*/false);
  const auto& sh = mha_bench::Shape();
  mha::ForwardInputs in;
  in.query = at::randn({sh.batch, sh.seq, sh.embed}, mha_bench::BenchTensorOptions());
  in.need_weights = need_weights;
  in.average_attn_weights = false;
  mha::ForwardOutputs out;
  for (int i = 0; i < 5; ++i) {  // warm: kernels chosen, allocator pools filled
    if (!model->Forward(in, &out).ok()) return 1;
    mha_bench::Synchronize(out.output);
  }
  const prof::ProfilerConfig config(prof::ProfilerState::KINETO);
  const std::set<prof::ActivityType> activities{prof::ActivityType::CPU, prof::ActivityType::CUDA};
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  for (int i = 0; i < passes; ++i) {
    RECORD_USER_SCOPE("pass");
    if (!model->Forward(in, &out).ok()) return 1;
    if (synced) mha_bench::Synchronize(out.output);
  }
  {
    RECORD_USER_SCOPE("drain");
    mha_bench::Synchronize(out.output);
  }
  prof::disableProfiler()->save(path);
  std::printf("mha_forward_trace: %d passes (%s) at %lld,%lld,%lld,%lld on %s: %s\n", passes,
              synced ? "synced" : "queued", static_cast<long long>(sh.batch),
              static_cast<long long>(sh.seq), static_cast<long long>(sh.embed),
              static_cast<long long>(sh.heads), mha_bench::BenchDevice().c_str(), path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT.json [synced|queued] [PASSES] [NEED_WEIGHTS]\n", argv[0]);
    return 2;
  }
  const std::string mode = argc > 2 ? argv[2] : "synced";
  const int passes = argc > 3 ? std::atoi(argv[3]) : 20;
  const bool need_weights = argc > 4 && std::atoi(argv[4]) != 0;
  if ((mode != "synced" && mode != "queued") || passes <= 0) {
    std::fprintf(stderr, "mode is synced or queued and PASSES > 0\n");
    return 2;
  }
  try {
    return Run(argv[1], mode == "synced", passes, need_weights);
  } catch (const c10::Error& e) {  // e.g. a LibTorch built without Kineto
    std::fprintf(stderr, "mha_forward_trace: %s\n", e.what_without_backtrace());
    return 1;
  }
}
