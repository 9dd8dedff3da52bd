// Where the Llama layer step's time goes on a GPU, as a timeline (scripts/gpu-profile.sh
// PROFILE_LLAMA=1 and scripts/gpu-check.sh step llamaprofile run it): LlamaLayerStep of N sessions
// of one new token each, every cache at CACHE tokens, on MHA_BENCH_DEVICE in MHA_BENCH_DTYPE, host
// hidden states in and out as the server's LayerSteps passes them, under LibTorch's Kineto profiler
// (CPU ops, CUDA runtime calls, kernels). Each step is inside a "pass" user scope and ends with its
// output on the host (synchronized), as bench/trace_passes.py reads a synced trace.
//
//   mha_llama_trace OUT.json [PASSES=10] [ATTENTION=0]
//     LLAMA_SHAPE=N,CACHE,E,H,KV (default 128,4096,4096,32,8: gpu-check's llamastep row; D = E / H)
//     ATTENTION: mha::StepAttention (0 = per-session: the padded pass on a device pool, 1 = padded,
//     2 = gather); random weights (the cost does not depend on them).
#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "llama_bench_util.h"
#include "mha/llama_step.h"

namespace {

namespace prof = torch::autograd::profiler;

struct Shape {
  int64_t sessions = 128, cache = 4096, embed = 4096, heads = 32, kv_heads = 8;
};

Shape ReadShape() {
  Shape s;
  const char* env = std::getenv("LLAMA_SHAPE");
  if (env == nullptr || *env == '\0') return s;
  std::vector<int64_t> v;
  std::stringstream in(env);
  for (std::string part; std::getline(in, part, ',');) v.push_back(std::stoll(part));
  if (v.size() >= 5) s = Shape{v[0], v[1], v[2], v[3], v[4]};
  return s;
}

std::string Env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

mha::StatusOr<std::shared_ptr<mha::LlamaAttentionStack>> MakeStack(const Shape& s) {
  mha::LlamaStackOptions options;
  options.device = Env("MHA_BENCH_DEVICE", "cuda");
  const std::string dtype = Env("MHA_BENCH_DTYPE", "float16");
  options.dtype = dtype == "float32"    ? mha::DType::kFloat32
                  : dtype == "bfloat16" ? mha::DType::kBFloat16
                                        : mha::DType::kFloat16;
  mha::LlamaConfig c;
  c.hidden_size = s.embed, c.num_attention_heads = s.heads, c.num_key_value_heads = s.kv_heads;
  c.head_dim = s.embed / s.heads, c.num_hidden_layers = 1;
  c.max_position_embeddings = s.cache + 64;
  return mha::LlamaAttentionStack::Create(options, c, mha_bench::RandomLlamaLayer(c, 0.02));
}

int Run(const std::string& path, int passes, mha::StepAttention attention) {
  const Shape s = ReadShape();
  auto made = MakeStack(s);
  if (!made.ok()) {
    std::fprintf(stderr, "mha_llama_trace: %s\n", made.status().ToString().c_str());
    return 1;
  }
  const mha::LlamaAttentionStack& stack = **made;
  const int64_t kv = stack.config().kv_dim();
  // Keys and values of every session at CACHE + 1 tokens, with room for a block's rounding.
  const int64_t bytes = 2 * s.sessions * (s.cache + 32) * kv *
                        (Env("MHA_BENCH_DTYPE", "float16") == "float32" ? 4 : 2);
  auto pool = stack.CreateKvPool({bytes, 16});
  if (!pool.ok()) {
    std::fprintf(stderr, "mha_llama_trace: %s\n", pool.status().ToString().c_str());
    return 1;
  }
  std::vector<std::unique_ptr<mha::KvCache>> caches;
  std::vector<at::Tensor> outs(static_cast<size_t>(s.sessions));
  std::vector<mha::LlamaStepItem> items;
  for (int64_t i = 0; i < s.sessions; ++i) {
    auto cache = std::make_unique<mha::KvCache>(*pool, 1);
    if (!cache->Reserve(s.cache + 1).ok()) return 1;
    cache->Append(at::randn({1, s.cache, kv}), at::randn({1, s.cache, kv}));
    caches.push_back(std::move(cache));
    items.push_back({caches.back().get(), at::randn({1, s.embed}), &outs[static_cast<size_t>(i)]});
  }
  auto step = [&] {
    mha::Status done = mha::LlamaLayerStep(stack, 0, items, attention);
    for (auto& c : caches) c->Truncate(s.cache);
    return done;
  };
  for (int i = 0; i < 3; ++i) {  // warm: kernels chosen, allocator pools filled
    if (const mha::Status st = step(); !st.ok()) {
      std::fprintf(stderr, "mha_llama_trace: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  std::vector<double> ms;  // the steps' wall time before the profiler, for the log
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!step().ok()) return 1;
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf("mha_llama_trace: a step in %.3f ms (median of 5, unprofiled)\n", ms[2]);
  const prof::ProfilerConfig config(prof::ProfilerState::KINETO);
  std::set<prof::ActivityType> activities{prof::ActivityType::CPU};
  if (at::hasCUDA()) activities.insert(prof::ActivityType::CUDA);
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  for (int i = 0; i < passes; ++i) {
    RECORD_USER_SCOPE("pass");
    if (!step().ok()) return 1;  // the outputs are on the host: the step is complete
  }
  prof::disableProfiler()->save(path);
  std::printf(
      "mha_llama_trace: %d steps of %lld sessions x 1 token, cache %lld, E=%lld H=%lld "
      "KV=%lld on %s (%s), attention %d: %s\n",
      passes, static_cast<long long>(s.sessions), static_cast<long long>(s.cache),
      static_cast<long long>(s.embed), static_cast<long long>(s.heads),
      static_cast<long long>(s.kv_heads), Env("MHA_BENCH_DEVICE", "cuda").c_str(),
      Env("MHA_BENCH_DTYPE", "float16").c_str(), static_cast<int>(attention), path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT.json [PASSES] [ATTENTION]\n", argv[0]);
    return 2;
  }
  const int passes = argc > 2 ? std::atoi(argv[2]) : 10;
  const int attention = argc > 3 ? std::atoi(argv[3]) : 0;
  if (passes <= 0 || attention < 0 || attention > 2) {
    std::fprintf(stderr, "PASSES > 0, ATTENTION 0, 1 or 2\n");
    return 2;
  }
  try {
    return Run(argv[1], passes, static_cast<mha::StepAttention>(attention));
  } catch (const c10::Error& e) {  // e.g. a LibTorch built without Kineto
    std::fprintf(stderr, "mha_llama_trace: %s\n", e.what_without_backtrace());
    return 1;
  }
}
