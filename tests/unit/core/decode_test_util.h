// Shared by the decode suites (decode_test.cc, decode_paged_test.cc): sessions of different
// lengths merged into one pass per round.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "mha/decode.h"
#include "mha/kv_cache.h"

namespace mha::testing {

// A pool for `model`'s sessions: `bytes` of pages of `block_tokens` tokens in `dtype` (nullptr,
// with a test failure, when it cannot be made).
inline std::shared_ptr<KvBlockPool> MakeKvPool(const MhaModel& model, int64_t block_tokens = 4,
                                               int64_t bytes = int64_t{1} << 20,
                                               KvCacheDtype dtype = KvCacheDtype::kModel) {
  auto pool = KvBlockPool::Create(KvPoolOptions{bytes, block_tokens, dtype}, model);
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  return pool.ok() ? *pool : nullptr;
}

// Fills every page of `pool` with NaN (an int8 pool's scales: its codes have no NaN): a padded or
// gathered step that let a page's unwritten slots reach an answer shows NaN there.
inline void FillNaN(const KvBlockPool& pool) {
  c10::InferenceMode guard;  // the pool's pages are inference tensors
  for (const at::Tensor* t :
       {&pool.keys(), &pool.values(), &pool.key_scales(), &pool.value_scales()}) {
    if (t->defined() && at::isFloatingType(t->scalar_type())) {
      t->fill_(std::numeric_limits<float>::quiet_NaN());
    }
  }
}

// Decodes a sequence of `total` tokens in `sessions` sessions, one merged pass per round: session
// i joins i rounds late with a prefill of i + 1 tokens, then goes on a token a round, so every
// pass mixes cache lengths (and short prefills with single tokens). `step_of(p, n)` is the step of
// query rows [p, p + n); `run` runs one pass; `check(i, p, n, out)` checks session i's answer for
// those rows.
inline void DecodeStaggered(
    const std::shared_ptr<KvBlockPool>& pool, int64_t total, int sessions,
    const std::function<StepInputs(int64_t p, int64_t n)>& step_of,
    const std::function<void(const std::vector<StepItem>&)>& run,
    const std::function<void(int i, int64_t p, int64_t n, const ForwardOutputs&)>& check) {
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<int64_t> done(static_cast<size_t>(sessions), 0);
  for (int i = 0; i < sessions; ++i) caches.push_back(std::make_unique<KvCache>(pool, 2));
  for (int round = 0; round < total + sessions; ++round) {
    std::vector<StepInputs> steps(static_cast<size_t>(sessions));
    std::vector<ForwardOutputs> outs(static_cast<size_t>(sessions));
    std::vector<StepItem> items;
    std::vector<int> who;
    for (int i = 0; i < sessions; ++i) {
      if (round < i || done[i] >= total) continue;
      const int64_t n = done[i] == 0 ? 1 + i : 1;
      steps[i] = step_of(done[i], n);
      ASSERT_TRUE(caches[i]->Reserve(n).ok());
      items.push_back(StepItem{caches[i].get(), false, &steps[i], &outs[i]});
      who.push_back(i);
    }
    if (items.empty()) continue;
    run(items);
    for (int i : who) {
      const int64_t n = steps[i].query.size(1);
      check(i, done[i], n, outs[i]);
      done[i] += n;
    }
  }
  for (int i = 0; i < sessions; ++i) EXPECT_EQ(done[i], total) << "session " << i;
}

}  // namespace mha::testing
