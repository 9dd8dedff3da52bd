// KV cache branches in one process (fork, truncate, spill; docs/core.md), E=512 H=8 fp32 on the
// CPU, pages of 16 tokens, one row (bench_setup.h's MHA_BENCH_DEVICE / MHA_BENCH_DTYPE apply):
//   BM_Fork/<tokens>: KvCache::Fork of a cache of `tokens` tokens, then the fork's release.
//   BM_ForkFirstStep/<tokens>: a fork at `tokens` (mid-block) taking its first token: the
//     copy-on-write of one block plus the step, then its release; vs
//   BM_PlainStep/<length>/<tokens>: a step of `tokens` at that length (rolled back after each
//     iteration).
//   BM_SpeculativeRound/<length>: a 4-token step, then TruncateTo(length + 2), then the rewind
//     of those 2 (each iteration leaves the cache as it was); vs BM_PlainStep/<length>/4.
//   BM_SpillRestore/<store>/<tokens>: Spill then Restore of a `tokens`-token cache, store 0 =
//     host memory, 1 = files under /tmp; counters: blocks per iteration.
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "bench_setup.h"
#include "mha/decode.h"
#include "mha/kv_spill.h"
#include "mha/model.h"

namespace {

constexpr int64_t kEmbed = 512, kHeads = 8;

void Check(const mha::Status& s) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s\n", s.ToString().c_str());
  std::abort();
}

const mha::MhaModel& Model() {
  static const std::unique_ptr<mha::MhaModel> model = mha_bench::MakeModel(kEmbed, kHeads);
  return *model;
}

std::shared_ptr<mha::KvBlockPool> Pool() {
  static auto pool = mha::KvBlockPool::Create({int64_t{1} << 30, 16}, Model()).value();
  return pool;
}

std::unique_ptr<mha::KvCache> Filled(int64_t length) {
  auto cache = std::make_unique<mha::KvCache>(Pool(), 1);
  Check(cache->Reserve(length));
  const at::TensorOptions on = mha_bench::BenchTensorOptions();
  cache->Append(at::randn({1, length, kEmbed}, on), at::randn({1, length, kEmbed}, on));
  return cache;
}

// One step of `t` new tokens.
void Step(mha::KvCache* cache, int64_t t, const at::Tensor& query) {
  mha::StepInputs step;
  step.query = query.narrow(1, 0, t);
  mha::ForwardOutputs out;
  Check(cache->Reserve(t));
  Check(mha::DecodeStep(Model(), cache, false, step, &out));
  benchmark::DoNotOptimize(out.output.data_ptr());
}

void BM_Fork(benchmark::State& state) {
  auto source = Filled(state.range(0));
  for (auto _ : state) {
    auto fork = source->Fork(source->length());
    benchmark::DoNotOptimize(fork.value().get());
  }
}
BENCHMARK(BM_Fork)->Arg(4096)->Unit(benchmark::kMicrosecond);

void BM_ForkFirstStep(benchmark::State& state) {
  auto source = Filled(state.range(0));
  const at::Tensor query = at::randn({1, 1, kEmbed});
  const int64_t before = Pool()->copies_on_write();
  for (auto _ : state) {
    auto fork = std::move(source->Fork(source->length() - 3).value());
    Step(fork.get(), 1, query);
  }
  state.counters["copies"] = benchmark::Counter(
      static_cast<double>(Pool()->copies_on_write() - before), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_ForkFirstStep)->Arg(4093)->Unit(benchmark::kMicrosecond);

void BM_PlainStep(benchmark::State& state) {
  auto cache = Filled(state.range(0));
  const int64_t t = state.range(1);
  const at::Tensor query = at::randn({1, t, kEmbed});
  for (auto _ : state) {
    Step(cache.get(), t, query);
    cache->RollbackTo(cache->length() - t);
  }
}
BENCHMARK(BM_PlainStep)
    ->ArgNames({"length", "tokens"})
    ->Args({1024, 1})
    ->Args({1024, 4})
    ->Args({4093, 1})
    ->Unit(benchmark::kMicrosecond);

void BM_SpeculativeRound(benchmark::State& state) {
  auto cache = Filled(state.range(0));
  const at::Tensor query = at::randn({1, 4, kEmbed});
  for (auto _ : state) {
    const int64_t start = cache->length();
    Step(cache.get(), 4, query);
    Check(cache->TruncateTo(start + 2));
    Check(cache->TruncateTo(start));  // the benchmark's own reset
  }
}
BENCHMARK(BM_SpeculativeRound)->Arg(1024)->Unit(benchmark::kMicrosecond);

void BM_SpillRestore(benchmark::State& state) {
  auto cache = Filled(state.range(1));
  std::shared_ptr<mha::KvSpillStore> store;
  if (state.range(0) == 0) {
    store = std::make_shared<mha::HostSpillStore>();
  } else {
    auto files = mha::FileSpillStore::Create({"/tmp/mha_kv_branch_bench", int64_t{1} << 30});
    if (!files.ok()) Check(files.status());
    store = std::move(files.value());
  }
  const int64_t blocks = cache->blocks_held();
  for (auto _ : state) {
    Check(cache->Spill(store, "bench"));
    Check(cache->Restore());
  }
  state.counters["blocks"] = static_cast<double>(blocks);
}
BENCHMARK(BM_SpillRestore)
    ->ArgNames({"store", "tokens"})
    ->ArgsProduct({{0, 1}, {1024}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
