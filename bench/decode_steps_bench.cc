// Decoding-session steps in one process (docs/sessions.md), E=512 H=8, fp32 on the CPU unless
// MHA_BENCH_DEVICE / MHA_BENCH_DTYPE say otherwise (bench_setup.h; the queries stay on the host,
// as the server's do):
//   BM_DecodeSteps/<attention>/<sessions>: one merged pass of one new token for each of
//     `sessions` sessions whose caches hold 1 .. 1024 tokens (spread evenly); attention 0 =
//     what the server runs (kPerSession: on the CPU the pages read in place,
//     mha/paged_attention.h; on a GPU the padded pass), 1 = padded to the longest + mask,
//     2 = per-session gather of each cache's blocks.
//   BM_DecodeChunk/<attention>/<T>: one session at cache length 512 taking T new tokens in one
//     step (a prefill chunk), attention as above: where reading the pages in place stops paying.
//   BM_DecodeOneToken/<S>: one session's step at cache length S, vs
//   BM_FullCausalLastRow/<S>: the stateless alternative, a full causal forward over S + 1
//     tokens of which the last row is kept.
// Each iteration leaves the caches as they were (the step's appended token is truncated away).
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "bench_setup.h"
#include "mha/decode.h"
#include "mha/model.h"

namespace {

constexpr int64_t kEmbed = 512, kHeads = 8;

const mha::MhaModel& Model() {
  static const std::unique_ptr<mha::MhaModel> model = mha_bench::MakeModel(kEmbed, kHeads);
  return *model;
}

std::shared_ptr<mha::KvBlockPool> Pool() {
  static auto pool = mha::KvBlockPool::Create({int64_t{2} << 30, 16}, Model()).value();
  return pool;
}

// A cache of `length` tokens (random keys/values; attention cost does not depend on them).
std::unique_ptr<mha::KvCache> Filled(int64_t length) {
  auto cache = std::make_unique<mha::KvCache>(Pool(), 1);
  if (!cache->Reserve(length + 1).ok()) std::abort();
  const at::TensorOptions on = mha_bench::BenchTensorOptions();
  cache->Append(at::randn({1, length, kEmbed}, on), at::randn({1, length, kEmbed}, on));
  return cache;
}

void BM_DecodeSteps(benchmark::State& state) {
  const auto attention = static_cast<mha::StepAttention>(state.range(0));
  const int64_t sessions = state.range(1);
  std::vector<std::unique_ptr<mha::KvCache>> caches;
  for (int64_t i = 0; i < sessions; ++i) caches.push_back(Filled(1 + i * 1023 / sessions));
  std::vector<mha::StepInputs> steps(static_cast<size_t>(sessions));
  std::vector<mha::ForwardOutputs> outs(static_cast<size_t>(sessions));
  std::vector<mha::StepItem> items;
  for (int64_t i = 0; i < sessions; ++i) {
    steps[i].query = at::randn({1, 1, kEmbed});
    items.push_back(mha::StepItem{caches[i].get(), false, &steps[i], &outs[i]});
  }
  for (auto _ : state) {
    if (!mha::DecodeSteps(Model(), items, attention).ok()) std::abort();
    for (auto& c : caches) c->Truncate(c->length() - 1);
    benchmark::DoNotOptimize(outs.back().output.data_ptr());
  }
  state.counters["steps/s"] = benchmark::Counter(static_cast<double>(sessions),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DecodeSteps)
    ->ArgNames({"attention", "sessions"})
    ->ArgsProduct({{0, 1, 2}, {1, 8, 64}})
    ->Unit(benchmark::kMillisecond);

void BM_DecodeChunk(benchmark::State& state) {
  const auto attention = static_cast<mha::StepAttention>(state.range(0));
  const int64_t t = state.range(1);
  auto cache = Filled(512);
  if (!cache->Reserve(t).ok()) std::abort();
  mha::StepInputs step;
  step.query = at::randn({1, t, kEmbed});
  mha::ForwardOutputs out;
  std::vector<mha::StepItem> items{mha::StepItem{cache.get(), false, &step, &out}};
  for (auto _ : state) {
    if (!mha::DecodeSteps(Model(), items, attention).ok()) std::abort();
    cache->Truncate(cache->length() - t);
  }
}
BENCHMARK(BM_DecodeChunk)
    ->ArgNames({"attention", "tokens"})
    ->ArgsProduct({{0, 2}, {1, 2, 4, 8, 16, 64}})
    ->Unit(benchmark::kMicrosecond);

void BM_DecodeOneToken(benchmark::State& state) {
  auto cache = Filled(state.range(0));
  mha::StepInputs step;
  step.query = at::randn({1, 1, kEmbed});
  mha::ForwardOutputs out;
  for (auto _ : state) {
    if (!mha::DecodeStep(Model(), cache.get(), false, step, &out).ok()) std::abort();
    cache->Truncate(cache->length() - 1);
  }
}
BENCHMARK(BM_DecodeOneToken)->Arg(128)->Arg(1023)->Unit(benchmark::kMicrosecond);

void BM_FullCausalLastRow(benchmark::State& state) {
  mha::ForwardInputs in;
  in.query = at::randn({1, state.range(0) + 1, kEmbed});
  in.is_causal = true;
  mha::ForwardOutputs out;
  for (auto _ : state) {
    if (!Model().Forward(in, &out).ok()) std::abort();
    benchmark::DoNotOptimize(out.output.select(1, -1).data_ptr());
  }
}
BENCHMARK(BM_FullCausalLastRow)->Arg(128)->Arg(1023)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
