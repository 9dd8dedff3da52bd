// What the core benchmarks (mha_core_bench, mha_decode_bench, mha_kv_branch_bench) and
// mha_forward_trace share: the shape, device and dtype the environment
// asks for (MHA_BENCH_SHAPE "B,T,E,H", MHA_BENCH_DEVICE, MHA_BENCH_DTYPE), the model they run and
// the FLOPs of one pass.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>

#include "mha/model.h"

namespace mha_bench {

// The shape: B=8, T=S=128, E=512, H=8 unless MHA_BENCH_SHAPE="B,T,E,H" (e.g. "4,4096,2048,16").
struct BenchShape {
  int64_t batch = 8, seq = 128, embed = 512, heads = 8;
};
const BenchShape& Shape();

// GPU work is asynchronous: waits for the whole device (no-op for host tensors).
void Synchronize(const at::Tensor& t);

std::string BenchDevice();  // MHA_BENCH_DEVICE, default "cpu"
mha::DType BenchDType();    // MHA_BENCH_DTYPE, default float32
// The device and dtype the model runs on ("auto" resolved as MhaModel does), for raw tensors.
at::TensorOptions BenchTensorOptions();

// FLOPs per pass: 8*B*T*E^2 (q/k/v/out projections) + 4*B*T*S*E (QK^T and PV).
double ForwardFlops(int64_t b, int64_t t, int64_t s, int64_t e);

// A model of Shape() on BenchDevice() in BenchDType() with random weights (seed 0) and
// `block_bytes` of scores per block on the CPU (0: unblocked); aborts with the status on failure.
std::unique_ptr<mha::MhaModel> MakeModel(bool cuda_graphs,
                                         int64_t block_bytes = mha::kDefaultAttentionBlockBytes);
// The same at a fixed width (E = `embed`, `heads` heads) whatever MHA_BENCH_SHAPE says.
std::unique_ptr<mha::MhaModel> MakeModel(int64_t embed, int64_t heads, bool cuda_graphs = true,
                                         int64_t block_bytes = mha::kDefaultAttentionBlockBytes);

}  // namespace mha_bench
