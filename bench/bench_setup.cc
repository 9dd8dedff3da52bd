#include "bench_setup.h"

#include <cstdio>
#include <cstdlib>

#include "mha/runtime.h"

#ifdef MHA_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace mha_bench {

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

void Synchronize(const at::Tensor& t) {
#ifdef MHA_WITH_CUDA
  if (t.is_cuda()) c10::cuda::device_synchronize();
#endif
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

std::unique_ptr<mha::MhaModel> MakeModel(bool cuda_graphs, int64_t block_bytes) {
  return MakeModel(Shape().embed, Shape().heads, cuda_graphs, block_bytes);
}

std::unique_ptr<mha::MhaModel> MakeModel(int64_t kEmbed, int64_t heads, bool cuda_graphs,
                                         int64_t block_bytes) {
  mha::MhaOptions o;
  o.embed_dim = kEmbed;
  o.num_heads = heads;
  o.device = BenchDevice();
  o.dtype = BenchDType();
  o.cuda_graphs = cuda_graphs;
  o.attention_block_bytes = block_bytes;
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

}  // namespace mha_bench
