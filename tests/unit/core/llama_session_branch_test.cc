// LlamaSessionCache's branches (Fork, TruncateTo, Spill, Restore) stepped by
// StepSessions on a 4-layer stack (tests/fixtures/llama/stack4_sessions), on pages filled with
// NaN first: every layer's every step equals the stack's causal forward of that layer over the
// branch's own whole sequence (<= 1e-5 in float32; the forward equals PyTorch's,
// llama_stack_test.cc), per session, gathered and padded. Forks at a block edge, mid-block and
// with layers of different lengths, a fork of a fork, a speculative rewind, spill and restore
// through both stores (and their refusals), and the pool back at its start in any release order.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "llama_test_util.h"
#include "mha/kv_spill.h"
#include "mha/llama_session.h"
#include "test_util.h"

namespace mha {
namespace llama_session_branch_test {

using testing::Contains;

constexpr int64_t kLayers = 4, kEmbed = 32;

// A session and every token it has seen, [T, E] (each layer's input: the layers are independent
// attention layers here, so one sequence feeds them all).
struct Branch {
  std::unique_ptr<LlamaSessionCache> session;
  at::Tensor seq;
};

class LlamaSessionBranchTest : public ::testing::TestWithParam<StepAttention> {
 protected:
  void SetUp() override {
    stack_ = testing::LoadLlamaStack(testing::LoadLlamaCase("stack4_sessions"));
    ASSERT_NE(stack_, nullptr);
    auto pool = stack_->CreateKvPool(KvPoolOptions{int64_t{1} << 20, /*block_tokens=*/4});
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    pool_ = *pool;
    FillNaN();
    at::manual_seed(45);
  }

  void FillNaN() {
    c10::InferenceMode guard;
    pool_->keys().fill_(std::numeric_limits<float>::quiet_NaN());
    pool_->values().fill_(std::numeric_limits<float>::quiet_NaN());
  }

  Branch Fresh() {
    auto s = LlamaSessionCache::Create({pool_, kLayers, 0});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return Branch{s.ok() ? std::move(s.value()) : nullptr, at::zeros({0, kEmbed})};
  }

  Branch Fork(const Branch& from, int64_t tokens) {
    auto fork = from.session->Fork(tokens);
    EXPECT_TRUE(fork.ok()) << fork.status().ToString();
    return Branch{fork.ok() ? std::move(fork.value()) : nullptr, from.seq.narrow(0, 0, tokens)};
  }

  // Each branch gets its tokens ([n, E]); layers 0 .. layers - 1 then catch up with the whole
  // sequence, one StepSessions pass per layer, every output checked.
  void Advance(const std::vector<Branch*>& branches, const std::vector<at::Tensor>& tokens,
               int64_t layers = kLayers) {
    for (size_t i = 0; i < branches.size(); ++i) {
      branches[i]->seq = at::cat({branches[i]->seq, tokens[i]}, 0);
    }
    for (int64_t l = 0; l < layers; ++l) {
      std::vector<at::Tensor> outs(branches.size());
      std::vector<LlamaSessionStep> entries;
      std::vector<size_t> who;
      std::vector<int64_t> from(branches.size());
      for (size_t i = 0; i < branches.size(); ++i) {
        Branch& b = *branches[i];
        from[i] = b.session->length(l);
        const int64_t n = b.seq.size(0) - from[i];
        if (n < 1) continue;
        entries.push_back({b.session.get(), b.seq.narrow(0, from[i], n), &outs[i]});
        who.push_back(i);
      }
      if (entries.empty()) continue;
      const Status s = StepSessions(*stack_, l, entries, GetParam());
      ASSERT_TRUE(s.ok()) << s.ToString();
      for (size_t i : who) {
        const Branch& b = *branches[i];
        const int64_t total = b.seq.size(0), n = total - from[i];
        at::Tensor want;
        ASSERT_TRUE(stack_->Forward(l, b.seq.unsqueeze(0), &want).ok());
        EXPECT_LE(testing::MaxAbsDiff(outs[i], want[0].narrow(0, from[i], n)),
                  testing::kFp32Tolerance)
            << "branch " << i << " layer " << l << " tokens " << from[i] << ".." << total - 1;
        EXPECT_EQ(b.session->length(l), total);
      }
    }
  }
  void Advance(Branch* b, int64_t n) { Advance({b}, {at::randn({n, kEmbed})}); }

  Branch Prefilled(int64_t total) {
    Branch b = Fresh();
    for (int64_t done = 0; done < total;) {
      const int64_t n = std::min<int64_t>(done == 0 ? 3 : 1, total - done);
      Advance(&b, n);
      done += n;
    }
    return b;
  }

  static at::Tensor One() { return at::randn({1, kEmbed}); }

  std::shared_ptr<LlamaAttentionStack> stack_;
  std::shared_ptr<KvBlockPool> pool_;
};

TEST_P(LlamaSessionBranchTest, ForkThenBothSidesStepDifferently) {
  for (int64_t at_token : {8, 6, 10}) {  // a block edge, mid-block, the source's end
    SCOPED_TRACE("fork at " + std::to_string(at_token));
    Branch source = Prefilled(10);
    const int64_t used = pool_->used_blocks(), copies = pool_->copies_on_write();
    Branch fork = Fork(source, at_token);
    ASSERT_NE(fork.session, nullptr);
    EXPECT_EQ(pool_->used_blocks(), used) << "a fork allocates no block";
    EXPECT_EQ(fork.session->shared_blocks_held(), kLayers * ((at_token + 3) / 4));
    Advance(&fork, 1);
    if (HasFatalFailure()) return;
    EXPECT_EQ(pool_->used_blocks(), used + kLayers) << "one block per layer";
    EXPECT_EQ(pool_->copies_on_write(), copies + (at_token % 4 == 0 ? 0 : kLayers));
    for (int round = 0; round < 5; ++round) {
      Advance({&source, &fork}, {One(), One()});
      if (HasFatalFailure()) return;
    }
  }
  EXPECT_EQ(pool_->used_blocks(), 0);
}

TEST_P(LlamaSessionBranchTest, AForkKeepsEachLayersOwnLength) {
  Branch source = Prefilled(7);
  Advance({&source}, {at::randn({3, kEmbed})}, /*layers=*/1);  // layer 0 holds 10, the rest 7
  Branch fork = Fork(source, 9);
  ASSERT_NE(fork.session, nullptr);
  EXPECT_EQ(fork.session->length(0), 9);
  for (int64_t l = 1; l < kLayers; ++l) EXPECT_EQ(fork.session->length(l), 7);
  Advance({&fork, &source}, {One(), One()});  // the lagging layers catch up
  Branch of_fork = Fork(fork, 4);
  Advance({&of_fork, &fork, &source}, {One(), One(), at::randn({2, kEmbed})});
}

TEST_P(LlamaSessionBranchTest, TruncateThenStepIsARewindOfEveryLayer) {
  Branch source = Prefilled(5);
  Branch fork = Fork(source, 5);
  for (Branch* b : {&source, &fork}) {
    for (int round = 0; round < 4; ++round) {
      const int64_t kept = b->seq.size(0) + 2;
      Advance(b, 4);
      if (HasFatalFailure()) return;
      ASSERT_TRUE(b->session->TruncateTo(kept).ok());
      b->seq = b->seq.narrow(0, 0, kept);
      EXPECT_EQ(b->session->blocks_held(), kLayers * ((kept + 3) / 4));
      Advance(b, 1);
      if (HasFatalFailure()) return;
    }
  }
  const Status past = source.session->TruncateTo(source.seq.size(0) + 1);
  EXPECT_EQ(past.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(past.message(), "truncate to 18 tokens: layer 0 of the session holds 17 (0 .. 17)");
  EXPECT_EQ(source.session->TruncateTo(-1).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(source.session->Fork(18).status().message(),
            "fork of 18 tokens: layer 0 of the session holds 17 (0 .. 17)");
  EXPECT_EQ(source.session->Fork(-1).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(source.session->length(3), 17);
}

TEST_P(LlamaSessionBranchTest, SpillThenRestoreThenStepThroughBothStores) {
  const std::string dir = ::testing::TempDir() + "llama_branch_spill";
  std::filesystem::remove_all(dir);
  auto files = FileSpillStore::Create({dir, int64_t{1} << 20});
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  const std::vector<std::shared_ptr<KvSpillStore>> stores = {
      std::make_shared<HostSpillStore>(), std::shared_ptr<KvSpillStore>(std::move(*files))};
  for (const auto& store : stores) {
    SCOPED_TRACE(store->Describe());
    Branch source = Prefilled(9);
    Advance({&source}, {One()}, /*layers=*/2);  // layers of 10, 10, 9, 9 tokens
    const int64_t bytes = (10 + 10 + 9 + 9) * pool_->bytes_per_token();
    const auto tight = std::make_shared<HostSpillStore>(bytes - 1);
    const Status over = source.session->Spill(tight, "s");
    EXPECT_EQ(over.code(), StatusCode::kResourceExhausted);
    EXPECT_TRUE(Contains(over.message(), "session 's' needs " + std::to_string(bytes) +
                                             " bytes over 4 layers, 0 of " +
                                             std::to_string(bytes - 1) + " held"))
        << over.message();
    EXPECT_FALSE(source.session->spilled());
    ASSERT_TRUE(source.session->Spill(store, "s").ok());
    EXPECT_EQ(source.session->spilled_bytes(), bytes);
    EXPECT_EQ(store->entries(), kLayers);
    EXPECT_EQ(pool_->used_blocks(), 0);
    EXPECT_EQ(source.session->BlocksToRestore(), 3 + 3 + 3 + 3);
    FillNaN();
    ASSERT_TRUE(source.session->Restore().ok());
    EXPECT_FALSE(source.session->spilled());
    EXPECT_EQ(store->entries(), 0);
    EXPECT_EQ(source.session->length(2), 9);
    Advance(&source, 1);
    Advance(&source, 2);
  }
  std::filesystem::remove_all(dir);
}

// A store that takes every key but one layer's: a Spill that fails midway brings the layers it
// spilled back, exactly.
class RefusingStore final : public KvSpillStore {
 public:
  Status Put(const std::string& key, const void* data, int64_t bytes) override {
    if (key == "s/layer2") return Internal("disk error on " + key);
    return host_.Put(key, data, bytes);
  }
  Status Get(const std::string& key, void* out, int64_t bytes) const override {
    return host_.Get(key, out, bytes);
  }
  void Remove(const std::string& key) override { host_.Remove(key); }
  int64_t bytes_held() const override { return host_.bytes_held(); }
  int64_t entries() const override { return host_.entries(); }
  int64_t max_bytes() const override { return 0; }
  std::string Describe() const override { return "refusing"; }

 private:
  HostSpillStore host_;
};

TEST_P(LlamaSessionBranchTest, ASpillThatFailsMidwayLeavesEveryLayerInPlace) {
  Branch source = Prefilled(6);
  const auto store = std::make_shared<RefusingStore>();
  const Status s = source.session->Spill(store, "s");
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(s.message(), "disk error on s/layer2");
  EXPECT_FALSE(source.session->spilled());
  EXPECT_EQ(store->entries(), 0);
  EXPECT_EQ(source.session->blocks_held(), kLayers * 2);
  EXPECT_EQ(pool_->used_blocks(), kLayers * 2);
  Advance(&source, 1);  // layers 0 and 1 came back from the store: still exact
}

TEST_P(LlamaSessionBranchTest, ARestoreThatDoesNotFitChangesNothing) {
  Branch source = Prefilled(8);  // 2 blocks per layer
  const auto store = std::make_shared<HostSpillStore>();
  ASSERT_TRUE(source.session->Spill(store, "s").ok());
  auto blocks = pool_->Allocate(pool_->total_blocks() - 7);  // 7 free, 8 needed
  ASSERT_TRUE(blocks.ok());
  const Status s = source.session->Restore();
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(s.message(), "8 blocks needed, 7 of")) << s.message();
  EXPECT_TRUE(source.session->spilled());
  EXPECT_EQ(source.session->blocks_held(), 0);
  EXPECT_EQ(store->entries(), kLayers);
  EXPECT_EQ(source.session->Fork(1).status().code(), StatusCode::kFailedPrecondition);
  pool_->Release(*blocks);
  ASSERT_TRUE(source.session->Restore().ok());
  Advance(&source, 1);
}

TEST_P(LlamaSessionBranchTest, EveryReleaseOrderGivesEveryBlockBack) {
  std::vector<int> order = {0, 1, 2};
  do {
    std::vector<Branch> branches;
    branches.push_back(Prefilled(6));
    branches.push_back(Fork(branches[0], 5));
    branches.push_back(Fork(branches[1], 3));
    Advance({&branches[1], &branches[2]}, {One(), One()});
    for (int i : order) branches[static_cast<size_t>(i)].session.reset();
    EXPECT_EQ(pool_->used_blocks(), 0);
    EXPECT_EQ(pool_->shared_blocks(), 0);
  } while (std::next_permutation(order.begin(), order.end()) && !HasFailure());
}

INSTANTIATE_TEST_SUITE_P(Modes, LlamaSessionBranchTest,
                         ::testing::Values(StepAttention::kPerSession, StepAttention::kGather,
                                           StepAttention::kPadded),
                         [](const auto& info) {
                           switch (info.param) {
                             case StepAttention::kPerSession:
                               return std::string("PerSession");
                             case StepAttention::kGather:
                               return std::string("Gather");
                             default:
                               return std::string("Padded");
                           }
                         });

}  // namespace llama_session_branch_test
}  // namespace mha
