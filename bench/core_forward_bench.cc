// Forward passes/s and GFLOP/s of mha_core at the shape (B=8, T=S=128, E=512, H=8; or
// MHA_BENCH_SHAPE), on MHA_BENCH_DEVICE (cpu) in MHA_BENCH_DTYPE (float32),
// with and without attention weights, beside a 1024^2 fp32 matmul measured in the same run. On
// CUDA also BM_ForwardHost (host query and outputs, 1 and 2 threads: see there).
// FLOPs per pass: 8*B*T*E^2 (q/k/v/out projections) + 4*B*T*S*E (QK^T and PV).
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>

#include "mha/attention_ops.h"
#include "mha/model.h"
#include "mha/runtime.h"

#ifdef MHA_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace {

// The shape: B=8, T=S=128, E=512, H=8 unless MHA_BENCH_SHAPE="B,T,E,H" (e.g. "4,4096,2048,16").
struct BenchShape {
  int64_t batch = 8, seq = 128, embed = 512, heads = 8;
};
const BenchShape& Shape() {
  static const BenchShape shape = [] {
    BenchShape s;
    if (const char* env = std::getenv("MHA_BENCH_SHAPE")) {
      long long b, t, e, h;
      if (std::sscanf(env, "%lld,%lld,%lld,%lld", &b, &t, &e, &h) == 4 && b > 0 && t > 0 && h > 0 &&
          e > 0 && e % h == 0) {
        s = BenchShape{b, t, e, h};
      } else {
        std::fprintf(stderr, "MHA_BENCH_SHAPE='%s' is not B,T,E,H; using the default\n", env);
      }
    }
    return s;
  }();
  return shape;
}

// GPU work is asynchronous: wait for it so each iteration times the whole pass.
void Synchronize(const at::Tensor& t) {
#ifdef MHA_WITH_CUDA
  if (t.is_cuda()) c10::cuda::device_synchronize();
#endif
  benchmark::DoNotOptimize(t.data_ptr());
}

std::string BenchDevice() {
  const char* device = std::getenv("MHA_BENCH_DEVICE");
  return device ? device : "cpu";
}

mha::DType BenchDType() {
  const char* name = std::getenv("MHA_BENCH_DTYPE");
  auto dtype = mha::ParseDType(name ? name : "float32");
  return dtype.ok() ? dtype.value() : mha::DType::kFloat32;
}

// The device and dtype the model runs on ("auto" resolved as MhaModel does), for raw tensors.
at::TensorOptions BenchTensorOptions() {
  std::string device = BenchDevice();
  if (device == "auto") device = at::hasCUDA() ? "cuda" : "cpu";
  return at::TensorOptions()
      .device(c10::Device(device))
      .dtype(BenchDType() == mha::DType::kFloat32   ? at::kFloat
             : BenchDType() == mha::DType::kFloat16 ? at::kHalf
                                                    : at::kBFloat16);
}

double ForwardFlops(int64_t b, int64_t t, int64_t s, int64_t e) {
  return 8.0 * b * t * e * e + 4.0 * b * t * s * e;
}

std::unique_ptr<mha::MhaModel> MakeModel(bool cuda_graphs) {
  const int64_t kEmbed = Shape().embed;
  mha::MhaOptions o;
  o.embed_dim = kEmbed;
  o.num_heads = Shape().heads;
  o.device = BenchDevice();
  o.dtype = BenchDType();
  o.cuda_graphs = cuda_graphs;
  at::manual_seed(0);
  mha::MhaWeights w;
  w.q_weight = at::randn({kEmbed, kEmbed}) * 0.05;
  w.k_weight = at::randn({kEmbed, kEmbed}) * 0.05;
  w.v_weight = at::randn({kEmbed, kEmbed}) * 0.05;
  w.out_weight = at::randn({kEmbed, kEmbed}) * 0.05;
  w.q_bias = at::zeros({kEmbed});
  w.k_bias = at::zeros({kEmbed});
  w.v_bias = at::zeros({kEmbed});
  w.out_bias = at::zeros({kEmbed});
  auto model = mha::MhaModel::Create(o, w);
  if (!model.ok()) {
    fprintf(stderr, "%s\n", model.status().ToString().c_str());
    std::abort();
  }
  return std::move(model).value();
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
