// Decode steps over branched KV caches ( mha/kv_cache.h's Fork, TruncateTo, Spill and
// Restore) on pages filled with NaN first: every branch's every step equals the model's one
// causal forward of that branch's own whole sequence (<= 1e-5 in float32; the forward equals
// PyTorch's, model_test.cc), in each StepAttention mode (per session: pages read in place and
// KvCache::Append; gathered; padded: KvBatch::Append). Forks at a block edge and mid-block, a
// fork of a fork, a speculative rewind, spill and restore through both stores, and the pool's
// usage back at its start when every branch is released, in any order.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "decode_test_util.h"
#include "mha/decode.h"
#include "mha/kv_spill.h"
#include "test_util.h"

namespace mha {
namespace decode_branch_test {

constexpr int64_t kBlockTokens = 4;

// A session's cache and every token it has seen ([B, length, E]).
struct Branch {
  std::unique_ptr<KvCache> cache;
  at::Tensor seq;
};

struct BranchParam {
  StepAttention attention;
  const char* name;
};

class DecodeBranchTest : public ::testing::TestWithParam<BranchParam> {
 protected:
  void SetUp() override {
    auto c = testing::LoadFixtureCase("decode_causal");  // E=32 H=4 B=2
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    model_ = testing::LoadCaseModel(*c, "cpu");
    ASSERT_NE(model_, nullptr);
    pool_ = testing::MakeKvPool(*model_, kBlockTokens);
    ASSERT_NE(pool_, nullptr);
    testing::FillNaN(*pool_);
    at::manual_seed(45);
  }

  at::Tensor Tokens(int64_t n) const { return at::randn({2, n, model_->options().embed_dim}); }

  Branch Fresh() { return Branch{std::make_unique<KvCache>(pool_, 2), Tokens(0)}; }

  Branch Fork(const Branch& from, int64_t tokens) {
    auto fork = from.cache->Fork(tokens);
    EXPECT_TRUE(fork.ok()) << fork.status().ToString();
    return Branch{fork.ok() ? std::move(fork.value()) : nullptr, from.seq.narrow(1, 0, tokens)};
  }

  // One pass: each branch brings its `tokens` ([B, n, E]); each output is checked against the
  // causal forward of the branch's whole sequence.
  void Step(const std::vector<Branch*>& branches, const std::vector<at::Tensor>& tokens) {
    std::vector<StepInputs> steps(branches.size());
    std::vector<ForwardOutputs> outs(branches.size());
    std::vector<StepItem> items;
    for (size_t i = 0; i < branches.size(); ++i) {
      steps[i].query = tokens[i];
      Status s = branches[i]->cache->Reserve(tokens[i].size(1));
      ASSERT_TRUE(s.ok()) << s.ToString();
      items.push_back(StepItem{branches[i]->cache.get(), false, &steps[i], &outs[i]});
    }
    Status s = DecodeSteps(*model_, items, GetParam().attention);
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (size_t i = 0; i < branches.size(); ++i) {
      Branch& b = *branches[i];
      const int64_t p = b.seq.size(1), n = tokens[i].size(1);
      b.seq = at::cat({b.seq, tokens[i]}, 1);
      ForwardInputs full;
      full.query = b.seq;
      full.is_causal = true;
      ForwardOutputs want;
      ASSERT_TRUE(model_->Forward(full, &want).ok());
      EXPECT_EQ(b.cache->length(), p + n);
      EXPECT_LE(testing::MaxAbsDiff(outs[i].output, want.output.narrow(1, p, n)),
                testing::kFp32Tolerance)
          << "branch " << i << " tokens " << p << ".." << p + n - 1;
    }
  }
  void Step(Branch* b, int64_t n) { Step({b}, {Tokens(n)}); }

  // `total` tokens into a fresh branch: a prefill of 3, then single tokens.
  Branch Prefilled(int64_t total) {
    Branch b = Fresh();
    for (int64_t done = 0; done < total;) {
      const int64_t n = std::min<int64_t>(done == 0 ? 3 : 1, total - done);
      Step(&b, n);
      done += n;
    }
    return b;
  }

  std::shared_ptr<MhaModel> model_;
  std::shared_ptr<KvBlockPool> pool_;
};

// Forks of a 10-token source at a block edge (8), mid-block (6) and at its end (10, mid-block in
// the source's own last block): no block until the fork writes; its first step takes one block
// per row (a copy mid-block, a new block at the edge); then both sides step differently.
TEST_P(DecodeBranchTest, ForkThenBothSidesStepDifferently) {
  for (int64_t at_token : {8, 6, 10}) {
    SCOPED_TRACE("fork at " + std::to_string(at_token));
    Branch source = Prefilled(10);
    const int64_t used = pool_->used_blocks(), copies = pool_->copies_on_write();
    Branch fork = Fork(source, at_token);
    ASSERT_NE(fork.cache, nullptr);
    EXPECT_EQ(pool_->used_blocks(), used) << "a fork allocates no block";
    EXPECT_EQ(fork.cache->blocks_held(), 2 * ((at_token + 3) / 4));
    EXPECT_EQ(fork.cache->shared_blocks_held(), fork.cache->blocks_held());
    EXPECT_EQ(fork.cache->BlocksNeeded(1), 2) << "one block per row: a copy or a new block";
    Step(&fork, 1);
    if (HasFatalFailure()) return;
    EXPECT_EQ(pool_->used_blocks(), used + 2);
    EXPECT_EQ(pool_->copies_on_write(), copies + (at_token % kBlockTokens == 0 ? 0 : 2));
    for (int round = 0; round < 6; ++round) {
      Step({&source, &fork}, {Tokens(1), Tokens(1)});
      if (HasFatalFailure()) return;
    }
    source = Branch{};
    fork = Branch{};
    EXPECT_EQ(pool_->used_blocks(), 0);
    EXPECT_EQ(pool_->shared_blocks(), 0);
  }
}

TEST_P(DecodeBranchTest, AForkOfAForkAndItsSourcesStepIndependently) {
  Branch a = Prefilled(10);
  Branch b = Fork(a, 9);
  Step(&b, 3);
  Branch c = Fork(b, 7);
  ASSERT_NE(c.cache, nullptr);
  for (int round = 0; round < 5; ++round) {
    Step({&a, &b, &c}, {Tokens(1), Tokens(1), Tokens(1)});
    if (HasFatalFailure()) return;
  }
  Step({&c, &a}, {Tokens(2), Tokens(3)});
}

// A speculative decoder: append 4 draft tokens, keep 2, go on; the rewind gives whole blocks back.
// On a fork too, whose rewound block is shared (the next write copies it).
TEST_P(DecodeBranchTest, TruncateThenStepIsARewind) {
  Branch source = Prefilled(6);
  Branch fork = Fork(source, 6);
  for (Branch* b : {&source, &fork}) {
    for (int round = 0; round < 4; ++round) {
      const int64_t kept = b->seq.size(1) + 2;
      Step(b, 4);
      if (HasFatalFailure()) return;
      ASSERT_TRUE(b->cache->TruncateTo(kept).ok());
      b->seq = b->seq.narrow(1, 0, kept);
      EXPECT_EQ(b->cache->blocks_held(), 2 * ((kept + 3) / 4));
      Step(b, 1);
      if (HasFatalFailure()) return;
    }
  }
  ASSERT_TRUE(fork.cache->TruncateTo(3).ok());  // into the blocks it still shares with nobody
  fork.seq = fork.seq.narrow(1, 0, 3);
  Step({&fork, &source}, {Tokens(1), Tokens(1)});
}

TEST_P(DecodeBranchTest, SpillThenRestoreThenStepThroughBothStores) {
  const std::string dir = ::testing::TempDir() + "decode_branch_spill";
  auto files = FileSpillStore::Create({dir, int64_t{1} << 20});
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  const std::vector<std::shared_ptr<KvSpillStore>> stores = {
      std::make_shared<HostSpillStore>(), std::shared_ptr<KvSpillStore>(std::move(*files))};
  for (const auto& store : stores) {
    SCOPED_TRACE(store->Describe());
    Branch source = Prefilled(9);
    Branch fork = Fork(source, 7);
    Step(&fork, 2);
    const int64_t held = source.cache->blocks_held(), used = pool_->used_blocks();
    ASSERT_TRUE(source.cache->Spill(store, "source").ok());
    EXPECT_TRUE(source.cache->spilled());
    EXPECT_EQ(source.cache->spilled_bytes(), 2 * 9 * pool_->bytes_per_token());
    EXPECT_EQ(store->bytes_held(), source.cache->spilled_bytes());
    EXPECT_EQ(pool_->used_blocks(), used - held + 2) << "the block per row the fork shares stays";
    testing::FillNaN(*pool_);  // every page: the restore must bring every byte back
    fork.cache->Release();     // its pages are NaN now too: it starts again
    fork.seq = Tokens(0);
    EXPECT_EQ(source.cache->BlocksNeeded(1), 2 * 3);
    ASSERT_TRUE(source.cache->Restore().ok());
    EXPECT_FALSE(source.cache->spilled());
    EXPECT_EQ(store->entries(), 0);
    EXPECT_EQ(source.cache->length(), 9);
    Step({&source, &fork}, {Tokens(1), Tokens(2)});
    Step(&source, 1);
  }
  EXPECT_EQ(pool_->used_blocks(), 0);
  std::filesystem::remove_all(dir);
}

TEST_P(DecodeBranchTest, EveryReleaseOrderGivesEveryBlockBack) {
  std::vector<int> order = {0, 1, 2, 3};
  do {
    std::vector<Branch> branches;
    branches.push_back(Prefilled(7));
    branches.push_back(Fork(branches[0], 7));
    branches.push_back(Fork(branches[0], 5));
    branches.push_back(Fork(branches[1], 6));
    Step({&branches[1], &branches[3]}, {Tokens(1), Tokens(1)});
    for (int i : order) {
      branches[static_cast<size_t>(i)].cache.reset();
      EXPECT_GE(pool_->used_blocks(), 0);
    }
    EXPECT_EQ(pool_->used_blocks(), 0);
    EXPECT_EQ(pool_->shared_blocks(), 0);
  } while (std::next_permutation(order.begin(), order.end()) && !HasFailure());
}

INSTANTIATE_TEST_SUITE_P(Modes, DecodeBranchTest,
                         ::testing::Values(BranchParam{StepAttention::kPerSession, "PerSession"},
                                           BranchParam{StepAttention::kGather, "Gather"},
                                           BranchParam{StepAttention::kPadded, "Padded"}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace decode_branch_test
}  // namespace mha
