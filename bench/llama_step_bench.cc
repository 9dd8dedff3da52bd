// The Llama per-layer step in one process (docs/afd.md), on the CPU in float32, at the shape of
// docs/performance.md's roofline row, E=1024 H=16 KV=4 (D=64):
//   BM_LlamaLayerStep/<attention>/<sessions>: one pass of one layer for `sessions` sessions of one
//     new token each, every cache at 512 tokens; attention 0 = per-session (the pages read in
//     place: what StepSessions runs on the CPU), 2 = per-session gather.
//   BM_LlamaLayerStepChunk/<T>: one session at cache 512 taking a T-token prefill chunk.
// Counters: steps/s and GFLOP/s (2 flops per multiply-add: the projections, q k^T and p v).
//   BM_LlamaPagedAttention/<sessions>: the attention alone (mha/paged_attention.h) of that step's
//     queries over the caches, K/V bytes read per second beside BM_CopyRate's.
//   BM_CopyRate: one core's copy bandwidth (memcpy of 256 MiB to another 256 MiB, bytes copied per
//     second), the roofline's memory term (bench/run_all.py's roofline row).
// MHA_LLAMA_CHECKPOINT=DIR runs the same on a checkpoint (gen_fixtures.py --llama-checkpoint DIR)
// instead of random weights; MHA_LLAMA_KV_HEADS=N another number of K/V heads (16 = MHA);
// MHA_KV_CACHE_DTYPE=int8 (bf16, fp16...) the caches in that dtype (docs/kv_cache_dtypes.md);
// MHA_PASS_THREADS=N the attention on N threads (mha/runtime.h PassThreads; default 1).
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "llama_bench_util.h"
#include "mha/llama_step.h"
#include "mha/paged_attention.h"
#include "mha/runtime.h"

namespace {

constexpr int64_t kCache = 512;

mha::StatusOr<std::shared_ptr<mha::LlamaAttentionStack>> MakeStack() {
  mha::LlamaStackOptions options;
  options.device = "cpu";
  const char* dir = std::getenv("MHA_LLAMA_CHECKPOINT");
  if (dir != nullptr && *dir != '\0') {
    options.path = dir;
    return mha::LlamaAttentionStack::Create(options);
  }
  mha::LlamaConfig c;
  const char* kv_heads = std::getenv("MHA_LLAMA_KV_HEADS");  // 4 unless set (16 = MHA)
  c.hidden_size = 1024, c.num_attention_heads = 16;
  c.num_key_value_heads = kv_heads != nullptr ? std::atoi(kv_heads) : 4;
  c.head_dim = 64, c.num_hidden_layers = 1, c.max_position_embeddings = 4096;
  return mha::LlamaAttentionStack::Create(options, c, mha_bench::RandomLlamaLayer(c, 0.03));
}

const mha::LlamaAttentionStack& Stack() {
  static const auto stack = [] {
    auto made = MakeStack();
    if (!made.ok()) {
      std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
      std::abort();
    }
    const mha::LlamaConfig& c = (*made)->config();
    std::fprintf(stderr, "Llama stack: L=%lld E=%lld H=%lld KV=%lld D=%lld\n",
                 static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
                 static_cast<long long>(c.num_attention_heads),
                 static_cast<long long>(c.num_key_value_heads), static_cast<long long>(c.head_dim));
    return *made;
  }();
  return *stack;
}

std::shared_ptr<mha::KvBlockPool> Pool() {
  static auto pool = [] {
    const char* name = std::getenv("MHA_KV_CACHE_DTYPE");
    auto dtype = mha::ParseKvCacheDtype(name != nullptr ? name : "model", "MHA_KV_CACHE_DTYPE");
    auto made = dtype.ok() ? Stack().CreateKvPool({int64_t{1} << 30, 16, *dtype})
                           : mha::StatusOr<std::shared_ptr<mha::KvBlockPool>>(dtype.status());
    if (!made.ok()) {
      std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
      std::abort();
    }
    std::fprintf(stderr, "KV cache dtype %s: %lld bytes per token\n",
                 mha::KvCacheDtypeName((*made)->cache_dtype()),
                 static_cast<long long>((*made)->bytes_per_token()));
    return *made;
  }();
  return pool;
}

// MHA_PASS_THREADS, 1 unless set.
int PassThreadsFromEnv() {
  const char* n = std::getenv("MHA_PASS_THREADS");
  return n != nullptr ? std::atoi(n) : 1;
}

// A layer cache of kCache tokens (random keys/values: the cost does not depend on them).
std::unique_ptr<mha::KvCache> Filled(int64_t extra) {
  const int64_t kv = Stack().config().kv_dim();
  auto cache = std::make_unique<mha::KvCache>(Pool(), 1);
  if (!cache->Reserve(kCache + extra).ok()) std::abort();
  cache->Append(at::randn({1, kCache, kv}), at::randn({1, kCache, kv}));
  return cache;
}

// Multiply-adds x 2 of one pass of `rows` new tokens over caches of about kCache tokens.
double Flops(int64_t rows) {
  const mha::LlamaConfig& c = Stack().config();
  const double r = static_cast<double>(rows), e = static_cast<double>(c.hidden_size);
  const double projections = 2 * r * e * (c.q_dim() + 2 * c.kv_dim()) + 2 * r * c.q_dim() * e;
  const double attention = 2 * 2 * r * c.num_attention_heads * (kCache + 1) * c.head_dim;
  return projections + attention;
}

void Run(benchmark::State& state, int64_t sessions, int64_t tokens, mha::StepAttention attention) {
  std::vector<std::unique_ptr<mha::KvCache>> caches;
  std::vector<at::Tensor> outs(static_cast<size_t>(sessions));
  std::vector<mha::LlamaStepItem> items;
  for (int64_t i = 0; i < sessions; ++i) {
    caches.push_back(Filled(tokens));
    items.push_back({caches.back().get(), at::randn({tokens, Stack().config().hidden_size}),
                     &outs[static_cast<size_t>(i)]});
  }
  mha::ScopedPassThreads threads(PassThreadsFromEnv());
  for (auto _ : state) {
    if (!mha::LlamaLayerStep(Stack(), 0, items, attention).ok()) std::abort();
    for (auto& c : caches) c->Truncate(kCache);
    benchmark::DoNotOptimize(outs.back().data_ptr());
  }
  state.counters["steps/s"] = benchmark::Counter(static_cast<double>(sessions),
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(Flops(sessions * tokens) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void BM_LlamaLayerStep(benchmark::State& state) {
  Run(state, state.range(1), 1, static_cast<mha::StepAttention>(state.range(0)));
}
BENCHMARK(BM_LlamaLayerStep)
    ->ArgsProduct({{0, 2}, {1, 32, 128}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_LlamaLayerStepChunk(benchmark::State& state) {
  Run(state, 1, state.range(0), mha::StepAttention::kPerSession);
}
BENCHMARK(BM_LlamaLayerStepChunk)->Arg(4)->Arg(64)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_LlamaPagedAttention(benchmark::State& state) {
  const mha::LlamaConfig& c = Stack().config();
  std::vector<std::unique_ptr<mha::KvCache>> caches;
  std::vector<mha::PagedItem> items;
  for (int64_t i = 0; i < state.range(0); ++i) {
    caches.push_back(Filled(0));
    items.push_back(mha::PagedItem{caches.back().get(), 1, true});
  }
  const at::Tensor q = at::randn({state.range(0), c.q_dim()});
  mha::ScopedPassThreads threads(PassThreadsFromEnv());
  for (auto _ : state) {
    at::Tensor out = mha::PagedAttention(*Pool(), c.num_attention_heads, items, q);
    benchmark::DoNotOptimize(out.data_ptr());
  }
  const double bytes = static_cast<double>(state.range(0) * kCache * Pool()->bytes_per_token());
  state.counters["bytes/s"] =
      benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_LlamaPagedAttention)->Arg(4)->Arg(128)->Unit(benchmark::kMicrosecond);

void BM_CopyRate(benchmark::State& state) {
  const size_t bytes = size_t{256} << 20;  // well past the last-level cache
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.counters["bytes/s"] =
      benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_CopyRate)->Unit(benchmark::kMillisecond)->MinTime(1.0);

}  // namespace

BENCHMARK_MAIN();
