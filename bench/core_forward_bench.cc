// Forward passes/s and GFLOP/s of mha_core at the benchmark shape (B=8, T=S=128, E=512, H=8; or
// MHA_BENCH_SHAPE), on MHA_BENCH_DEVICE (cpu) in MHA_BENCH_DTYPE (float32),
// with and without attention weights, beside a 1024^2 fp32 matmul measured in the same run. On
// CUDA also BM_ForwardQueued (a device caller's passes back to back) and BM_ForwardHost (host query
// and outputs, 1 and 2 threads: see there).
// FLOPs per pass: 8*B*T*E^2 (q/k/v/out projections) + 4*B*T*S*E (QK^T and PV).
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>

#include "bench_setup.h"
#include "mha/attention_ops.h"
#include "mha/model.h"
#include "mha/runtime.h"

namespace {

using mha_bench::BenchTensorOptions;
using mha_bench::ForwardFlops;
using mha_bench::MakeModel;
using mha_bench::Shape;

// Each iteration times the whole pass: the device's queued work included, the output kept.
void Synchronize(const at::Tensor& t) {
  mha_bench::Synchronize(t);
  benchmark::DoNotOptimize(t.data_ptr());
}

// The eager model (BM_Forward, BM_ForwardHost) and one that replays CUDA graphs (BM_ForwardGraphs).
const mha::MhaModel& Model(bool cuda_graphs = false) {
  static const auto eager = MakeModel(false);
  if (!cuda_graphs) return *eager;
  static const auto graphed = MakeModel(true);
  return *graphed;
}

void BM_Forward(benchmark::State& state) {
  const mha::MhaModel& model = Model(state.range(1) != 0);
  mha::ForwardInputs in;
  const auto& sh = Shape();
  // On a GPU the input starts there (as for PyTorch's own module); on the CPU it stays fp32.
  const auto opts = BenchTensorOptions();
  in.query = at::randn({sh.batch, sh.seq, sh.embed},
                       opts.device().is_cuda() ? opts : at::TensorOptions().dtype(at::kFloat));
  in.need_weights = state.range(0) != 0;
  in.average_attn_weights = false;
  mha::ForwardOutputs out;
  for (auto _ : state) {
    if (!model.Forward(in, &out).ok()) state.SkipWithError("forward failed");
    Synchronize(out.output);
  }
  state.counters["passes/s"] = benchmark::Counter(state.iterations(), benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(
      ForwardFlops(sh.batch, sh.seq, sh.seq, sh.embed) * state.iterations() / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Forward)
    ->ArgNames({"need_weights", "graphs"})
    ->Args({0, 0})
    ->Args({1, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// A device caller's passes back to back: Forward returns with the pass queued on the caller's
// stream (mha/model.h), so the host prepares pass n+1 while the GPU runs pass n; the device is
// synchronized every 16 passes and after the last, as PyTorch's back-to-back timing
// (bench/torch_gpu_reference.py's "ms") does. Registered in main for CUDA only.
void BM_ForwardQueued(benchmark::State& state) {
  const mha::MhaModel& model = Model(state.range(1) != 0);
  const auto& sh = Shape();
  mha::ForwardInputs in;
  in.query = at::randn({sh.batch, sh.seq, sh.embed}, BenchTensorOptions());
  in.need_weights = state.range(0) != 0;
  in.average_attn_weights = false;
  mha::ForwardOutputs out;
  int64_t passes = 0;
  for (auto _ : state) {
    if (!model.Forward(in, &out).ok()) state.SkipWithError("forward failed");
    if (++passes % 16 == 0 || passes == static_cast<int64_t>(state.max_iterations)) {
      Synchronize(out.output);
    }
  }
  state.counters["passes/s"] = benchmark::Counter(state.iterations(), benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(
      ForwardFlops(sh.batch, sh.seq, sh.seq, sh.embed) * state.iterations() / 1e9,
      benchmark::Counter::kIsRate);
}

// The serving path on a GPU: the query in host memory in the model's dtype (as a request decodes
// it), staged through pinned memory to the device, outputs back to the host, the thread's own
// stream synchronized (MhaModel::ForwardValidated; mha/device_stream.h). Registered in main for
// CUDA only, at 1 and 2 threads: 2 threads are two instances of one model, each on its own pool
// stream, and passes/s (summed over threads) at 2 vs 1 is the overlap the streams give.
void BM_ForwardHost(benchmark::State& state) {
  const mha::MhaModel& model = Model();
  const auto& sh = Shape();
  mha::ForwardInputs in;
  in.query = at::randn({sh.batch, sh.seq, sh.embed}, at::TensorOptions().dtype(at::kFloat))
                 .to(BenchTensorOptions().dtype().toScalarType());
  in.need_weights = state.range(0) != 0;
  in.average_attn_weights = false;
  mha::ForwardOutputs out;
  for (auto _ : state) {
    if (!model.ForwardValidated(in, &out).ok()) state.SkipWithError("forward failed");
    benchmark::DoNotOptimize(out.output.data_ptr());  // on the host and complete on return
  }
  state.counters["passes/s"] = benchmark::Counter(state.iterations(), benchmark::Counter::kIsRate);
}

// Blocked attention (mha/attention_blocks.h): the output-only pass with `block_kib` KiB of scores
// per block on the CPU (0 = unblocked, the pass before blocking), causal or not, in one binary so
// that the block budget is measured against the unblocked pass on the same machine and run:
// MHA_BENCH_SHAPE=1,4096,512,8 mha_core_bench --benchmark_filter=ForwardBlocks.
void BM_ForwardBlocks(benchmark::State& state) {
  const bool causal = state.range(0) != 0;
  const int64_t block_bytes = state.range(1) * 1024;
  static std::map<int64_t, std::unique_ptr<mha::MhaModel>> models;
  auto& model = models[block_bytes];
  if (!model) model = MakeModel(false, block_bytes);
  const auto& sh = Shape();
  mha::ForwardInputs in;
  in.query = at::randn({sh.batch, sh.seq, sh.embed});
  in.is_causal = causal;
  mha::ForwardOutputs out;
  for (auto _ : state) {
    if (!model->Forward(in, &out).ok()) state.SkipWithError("forward failed");
    Synchronize(out.output);
  }
}
BENCHMARK(BM_ForwardBlocks)
    ->ArgNames({"causal", "block_kib"})
    ->ArgsProduct({{0, 1}, {0, 512, 1024, 2048, 4096, 8192, 16384}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The attention step alone, [B, H, T, D] (= [8, 8, 128, 64] by default), on the bench device and
// dtype: the fused kernel against the explicit
// softmax path, to show what each costs on this LibTorch and device.
void BM_AttentionStep(benchmark::State& state) {
  const bool fused = state.range(0) != 0;
  const auto& sh = Shape();
  const int64_t d = sh.embed / sh.heads;
  const auto opts = BenchTensorOptions();
  at::Tensor q = at::randn({sh.batch, sh.heads, sh.seq, d}, opts),
             k = at::randn({sh.batch, sh.heads, sh.seq, d}, opts),
             v = at::randn({sh.batch, sh.heads, sh.seq, d}, opts);
  at::Tensor weights;
  for (auto _ : state) {
    at::Tensor out = fused ? mha::fused_attention(q, k, v, at::Tensor(), false)
                           : mha::attention_with_weights(q, k, v, at::Tensor(), &weights);
    Synchronize(out);
  }
}
BENCHMARK(BM_AttentionStep)
    ->ArgName("fused")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The reference rate: a 1024^2 matmul on the same device and dtype as the model.
void BM_Matmul1024(benchmark::State& state) {
  const auto opts = BenchTensorOptions();
  at::Tensor a = at::randn({1024, 1024}, opts), b = at::randn({1024, 1024}, opts);
  for (auto _ : state) Synchronize(at::mm(a, b));
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * 1024 * 1024 * 1024 * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Matmul1024)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  mha::ThreadingOptions threads;
  if (const char* n = std::getenv("MHA_INTRA_OP_THREADS")) threads.intra_op_threads = std::atoi(n);
  if (const mha::Status s = mha::ConfigureThreads(threads); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  if (BenchTensorOptions().device().is_cuda()) {
    // The same pass replayed from a CUDA graph (mha/cuda_graphs.h; output only, so no weights).
    benchmark::RegisterBenchmark("BM_Forward", BM_Forward)
        ->ArgNames({"need_weights", "graphs"})
        ->Args({0, 1})
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark("BM_ForwardQueued", BM_ForwardQueued)
        ->ArgNames({"need_weights", "graphs"})
        ->Args({0, 0})
        ->Args({1, 0})
        ->Args({0, 1})
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark("BM_ForwardHost", BM_ForwardHost)
        ->ArgName("need_weights")
        ->Arg(0)
        ->Arg(1)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->Threads(1)
        ->Threads(2);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("runtime", mha::RuntimeSummary());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
