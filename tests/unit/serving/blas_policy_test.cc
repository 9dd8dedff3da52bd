// BlasPassPolicy: the OpenBLAS threads a pass gets (blas_policy.h), as a pure rule and as what
// OpenBLAS itself reports inside the passes of a real DynamicBatcher.
#include "server/serving/scheduling/blas_policy.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <vector>

#include "mha/runtime.h"
#include "mha/tensor_adapter.h"
#include "pass_gate.h"
#include "server/serving/kinds/multihead/dynamic_batcher.h"

namespace mha::serve {
namespace blas_policy_test {

using namespace std::chrono_literals;

TEST(BlasPassPolicyTest, AutoThreadsOnlyTheOnlyWork) {
  const BlasPassPolicy policy({.threads = 0, .cores = 3});
  EXPECT_EQ(policy.ThreadsFor(1, true), 3);   // one request, nothing queued, no other pass
  EXPECT_EQ(policy.ThreadsFor(1, false), 1);  // merged requests or a queue behind it
  EXPECT_EQ(policy.ThreadsFor(2, true), 1);   // another pass runs
}

TEST(BlasPassPolicyTest, FixedAndLeaveAlone) {
  EXPECT_EQ(BlasPassPolicy({.threads = 2, .cores = 3}).ThreadsFor(5, false), 2);
  EXPECT_EQ(BlasPassPolicy({.threads = -1, .cores = 3}).ThreadsFor(1, true), 0);
}

TEST(BlasPassPolicyTest, PassCountsRunningPasses) {
  const BlasPassPolicy policy({.threads = -1, .cores = 2});
  const int before = BlasPassPolicy::Running();
  {
    const BlasPassPolicy::Pass a(policy, true);
    EXPECT_EQ(BlasPassPolicy::Running(), before + 1);
    const BlasPassPolicy::Pass b(policy, true);
    EXPECT_EQ(BlasPassPolicy::Running(), before + 2);
    EXPECT_EQ(b.threads(), 0);
  }
  EXPECT_EQ(BlasPassPolicy::Running(), before);
}

// A pass's CPU attention gets its GEMMs' threads (PassThreads, on the pass's thread), 1 when the
// policy leaves OpenBLAS alone, and the thread's setting comes back after the pass.
TEST(BlasPassPolicyTest, APassesAttentionGetsItsGemmsThreads) {
  ASSERT_EQ(PassThreads(), 1);
  {
    const BlasPassPolicy::Pass lone(BlasPassPolicy({.threads = 0, .cores = 3}), true);
    EXPECT_EQ(PassThreads(), BlasPassPolicy::Running() == 1 ? 3 : 1);
  }
  EXPECT_EQ(PassThreads(), 1);
  {
    const BlasPassPolicy::Pass fixed(BlasPassPolicy({.threads = 2, .cores = 3}), false);
    EXPECT_EQ(PassThreads(), 2);
  }
  {
    const BlasPassPolicy::Pass alone(BlasPassPolicy({.threads = -1, .cores = 3}), true);
    EXPECT_EQ(PassThreads(), 1);
  }
  EXPECT_EQ(PassThreads(), 1);
}

// The batcher's passes, as OpenBLAS sees them: a lone request gets every core, a merged pass one
// thread, and so does a request alone right after a merged pass (lone needs two such passes in a
// row); the next one alone gets every core again. Skipped where the BLAS is not OpenBLAS.
TEST(BlasPassPolicyTest, BatcherSetsOpenBlasPerPass) {
  if (BlasThreads() < 0) GTEST_SKIP() << "not OpenBLAS";
  std::mutex mu;
  std::condition_variable answered_cv;
  int answered = 0;
  std::vector<std::pair<int64_t, int>> seen;  // (rows, OpenBLAS threads) per pass
  auto forward = [&](const ForwardInputs& in, ForwardOutputs* out) {
    {
      std::lock_guard<std::mutex> lock(mu);
      seen.emplace_back(in.query.size(0), BlasThreads());
    }
    out->output = in.query.clone();
    return Status::Ok();
  };
  BatcherOptions o;
  o.instances = 1;
  o.blas = {.threads = 0, .cores = 3};
  testing::PassGate gate;  // holds pass 1 while the other three queue behind it
  o.pass_hook = gate.Hook();
  DynamicBatcher batcher("fake", BatchModelInfo{1, 0, DType::kFloat32}, forward, o);
  const testing::ReleaseOnExit release_on_exit(gate);  // before the batcher waits for pass 1
  auto done = [&](InferenceResult r) {
    EXPECT_TRUE(r.status.ok()) << r.status.ToString();
    std::lock_guard<std::mutex> lock(mu);
    ++answered;
    answered_cv.notify_all();
  };
  auto wait_answered = [&](int n) {
    std::unique_lock<std::mutex> lock(mu);
    return answered_cv.wait_for(lock, testing::kWaitTimeout, [&] { return answered >= n; });
  };
  auto task = [] {
    InferenceTask t;
    t.model_name = "fake";
    t.inputs.query = ToHost(at::ones({1, 2, 4}));
    return t;
  };
  gate.Hold();
  batcher.Submit(task(), done);  // alone: every core
  ASSERT_TRUE(gate.WaitEntered(1));
  for (int i = 0; i < 3; ++i) batcher.Submit(task(), done);  // queued behind it: one pass of 3
  gate.ReleaseAll();
  ASSERT_TRUE(wait_answered(4));
  batcher.Submit(task(), done);  // alone, but right after the merged pass: one thread
  ASSERT_TRUE(wait_answered(5));
  batcher.Submit(task(), done);  // alone after alone: every core again
  ASSERT_TRUE(wait_answered(6));
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0], std::make_pair(int64_t{1}, 3));
  EXPECT_EQ(seen[1], std::make_pair(int64_t{3}, 1));
  EXPECT_EQ(seen[2], std::make_pair(int64_t{1}, 1));
  EXPECT_EQ(seen[3], std::make_pair(int64_t{1}, 3));
}

}  // namespace blas_policy_test
}  // namespace mha::serve
