// KvCache (mha/kv_cache.h) on a pool made from a layout (no model): a session's cache grows block
// by block per row, all or nothing; appended rows read back exactly in split_heads layout and lie
// where table() says in the pool's pages; RollbackTo forgets tokens but keeps their blocks,
// TruncateTo gives them back; forks share blocks by reference count and copy one on its first
// write; Release and destruction give every block back; misuse throws. (Merged decoding over caches
// is decode_test.cc / decode_paged_test.cc; several caches in one op is kv_batch_test.cc.)
#include "mha/kv_cache.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "mha/kv_batch.h"
#include "mha/kv_layout.h"

namespace mha {
namespace kv_cache_test {

constexpr int64_t kHeads = 2, kHeadDim = 3, kEmbed = kHeads * kHeadDim;
constexpr int64_t kBlockTokens = 4;
constexpr int64_t kTokenBytes = 2 * kEmbed * 4;  // keys + values, float32

// A float32 CPU pool of `blocks` blocks of 4 tokens, 2 heads of 3.
std::shared_ptr<KvBlockPool> Pool(int64_t blocks) {
  auto pool = KvBlockPool::Create(KvPoolOptions{blocks * kBlockTokens * kTokenBytes, kBlockTokens},
                                  KvLayout{kHeads, kHeadDim, at::kFloat, c10::Device(c10::kCPU)});
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  return pool.ok() ? *pool : nullptr;
}

// [rows, T, H * D] -> [rows, H, T, D], as split_heads.
at::Tensor SplitHeads(const at::Tensor& x) {
  return x.view({x.size(0), x.size(1), kHeads, kHeadDim}).transpose(1, 2);
}

TEST(KvCacheTest, GrowsABlockPerRowAtATime) {
  auto pool = Pool(16);
  ASSERT_NE(pool, nullptr);
  KvCache cache(pool, 3);
  EXPECT_EQ(cache.rows(), 3);
  EXPECT_EQ(cache.BlocksNeeded(1), 3);  // one block per row
  EXPECT_EQ(cache.BlocksNeeded(4), 3);
  EXPECT_EQ(cache.BlocksNeeded(5), 6);
  ASSERT_TRUE(cache.Reserve(5).ok());
  EXPECT_EQ(cache.blocks_held(), 6);
  EXPECT_EQ(pool->used_blocks(), 6);
  EXPECT_EQ(cache.table(0).size(), 2u);
  EXPECT_EQ(cache.BlocksNeeded(8), 0) << "8 tokens fit in the 2 blocks a row holds";
  ASSERT_TRUE(cache.Reserve(8).ok());
  EXPECT_EQ(pool->used_blocks(), 6);
  EXPECT_EQ(cache.length(), 0) << "reserving is not appending";
}

TEST(KvCacheTest, AReservationThatDoesNotFitTakesNothing) {
  auto pool = Pool(5);
  ASSERT_NE(pool, nullptr);
  KvCache a(pool, 2);
  ASSERT_TRUE(a.Reserve(4).ok());  // 2 blocks, 3 free
  KvCache b(pool, 2);
  const Status full = b.Reserve(8);  // 4 blocks
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(b.blocks_held(), 0);
  EXPECT_EQ(pool->free_blocks(), 3);
  ASSERT_TRUE(b.Reserve(4).ok());
  EXPECT_EQ(pool->free_blocks(), 1);
}

TEST(KvCacheTest, AppendedRowsReadBackInSplitHeadsLayoutAcrossBlocks) {
  auto pool = Pool(16);
  ASSERT_NE(pool, nullptr);
  KvCache other(pool, 1), cache(pool, 2);
  const at::Tensor k = at::randn({2, 9, kEmbed}), v = at::randn({2, 9, kEmbed});
  int64_t p = 0;
  for (int64_t n : {1, 5, 3}) {  // crosses both block boundaries
    ASSERT_TRUE(cache.Reserve(n).ok());
    ASSERT_TRUE(other.Reserve(n).ok());  // the two caches' blocks interleave in the pool
    cache.Append(k.narrow(1, p, n), v.narrow(1, p, n));  // strided views
    other.Append(at::zeros({1, n, kEmbed}), at::zeros({1, n, kEmbed}));
    p += n;
    EXPECT_EQ(cache.length(), p);
  }
  EXPECT_TRUE(at::equal(cache.Keys(), SplitHeads(k)));
  EXPECT_TRUE(at::equal(cache.Values(), SplitHeads(v)));
  EXPECT_TRUE(at::equal(other.Keys(), at::zeros({1, kHeads, 9, kHeadDim})));
}

TEST(KvCacheTest, TheTableSaysWhereEachTokenLiesInThePool) {
  auto pool = Pool(16);
  ASSERT_NE(pool, nullptr);
  KvCache cache(pool, 2);
  const at::Tensor k = at::randn({2, 6, kEmbed}), v = at::randn({2, 6, kEmbed});
  ASSERT_TRUE(cache.Reserve(6).ok());
  cache.Append(k, v);
  c10::InferenceMode guard;  // the pool's pages are inference tensors
  for (int64_t row = 0; row < 2; ++row) {
    for (int64_t pos = 0; pos < 6; ++pos) {
      const int64_t slot =
          cache.table(row).at(static_cast<size_t>(pos / kBlockTokens)) * kBlockTokens +
          pos % kBlockTokens;
      EXPECT_TRUE(at::equal(pool->keys()[slot], k[row][pos].view({kHeads, kHeadDim})))
          << "row " << row << " position " << pos;
      EXPECT_TRUE(at::equal(pool->values()[slot], v[row][pos].view({kHeads, kHeadDim})));
    }
  }
}

TEST(KvCacheTest, RollbackForgetsTokensButKeepsTheirBlocks) {
  auto pool = Pool(16);
  ASSERT_NE(pool, nullptr);
  KvCache cache(pool, 1);
  const at::Tensor k = at::randn({1, 7, kEmbed}), v = at::randn({1, 7, kEmbed});
  ASSERT_TRUE(cache.Reserve(7).ok());
  cache.Append(k, v);
  cache.RollbackTo(3);
  EXPECT_EQ(cache.length(), 3);
  EXPECT_EQ(cache.blocks_held(), 2);
  EXPECT_TRUE(at::equal(cache.Keys(), SplitHeads(k.narrow(1, 0, 3))));
  cache.RollbackTo(5);  // never grows
  EXPECT_EQ(cache.length(), 3);
  // The next append goes where the forgotten tokens were.
  const at::Tensor k2 = at::randn({1, 2, kEmbed}), v2 = at::randn({1, 2, kEmbed});
  ASSERT_TRUE(cache.Reserve(2).ok());
  EXPECT_EQ(cache.blocks_held(), 2);
  cache.Append(k2, v2);
  EXPECT_TRUE(at::equal(cache.Keys(), SplitHeads(at::cat({k.narrow(1, 0, 3), k2}, 1))));
  EXPECT_TRUE(at::equal(cache.Values(), SplitHeads(at::cat({v.narrow(1, 0, 3), v2}, 1))));
}

TEST(KvCacheTest, ReleaseAndDestructionGiveEveryBlockBack) {
  auto pool = Pool(8);
  ASSERT_NE(pool, nullptr);
  {
    KvCache cache(pool, 2);
    ASSERT_TRUE(cache.Reserve(6).ok());
    cache.Append(at::randn({2, 6, kEmbed}), at::randn({2, 6, kEmbed}));
    EXPECT_EQ(pool->used_blocks(), 4);
    cache.Release();
    EXPECT_EQ(pool->used_blocks(), 0);
    EXPECT_EQ(cache.length(), 0);
    EXPECT_EQ(cache.blocks_held(), 0);
    // Empty, it grows again.
    const at::Tensor k = at::randn({2, 1, kEmbed}), v = at::randn({2, 1, kEmbed});
    ASSERT_TRUE(cache.Reserve(1).ok());
    cache.Append(k, v);
    EXPECT_TRUE(at::equal(cache.Keys(), SplitHeads(k)));
    EXPECT_EQ(pool->used_blocks(), 2);
  }
  EXPECT_EQ(pool->used_blocks(), 0) << "the destroyed cache kept blocks";
}

TEST(KvCacheTest, AppendingRowsThatDoNotMatchThrows) {
  auto pool = Pool(8);
  ASSERT_NE(pool, nullptr);
  KvCache cache(pool, 2);
  ASSERT_TRUE(cache.Reserve(1).ok());
  EXPECT_THROW(cache.Append(at::randn({3, 1, kEmbed}), at::randn({3, 1, kEmbed})), c10::Error);
  EXPECT_THROW(cache.Append(at::randn({2, 1, kEmbed + 1}), at::randn({2, 1, kEmbed + 1})),
               c10::Error);
  EXPECT_EQ(cache.length(), 0);
}

// `n` random tokens appended to `cache` (after its Reserve).
void Grow(KvCache* cache, int64_t n) {
  ASSERT_TRUE(cache->Reserve(n).ok());
  cache->Append(at::randn({cache->rows(), n, kEmbed}), at::randn({cache->rows(), n, kEmbed}));
}

std::unique_ptr<KvCache> ForkOf(const KvCache& cache, int64_t tokens) {
  auto fork = cache.Fork(tokens);
  EXPECT_TRUE(fork.ok()) << fork.status().ToString();
  return fork.ok() ? std::move(fork.value()) : nullptr;
}

TEST(KvBlockPoolTest, ReferenceCountsFreeABlockAtZeroAndCountItOnce) {
  auto pool = Pool(4);
  ASSERT_NE(pool, nullptr);
  auto blocks = pool->Allocate(2);
  ASSERT_TRUE(blocks.ok());
  EXPECT_EQ(pool->ref_count((*blocks)[0]), 1);
  pool->Share(*blocks);
  pool->Share({(*blocks)[0]});
  EXPECT_EQ(pool->ref_count((*blocks)[0]), 3);
  EXPECT_EQ(pool->used_blocks(), 2) << "a shared block counts once";
  EXPECT_EQ(pool->shared_blocks(), 2);
  EXPECT_EQ(pool->SharedAmong({(*blocks)[1]}), 1);
  pool->Release(*blocks);
  EXPECT_EQ(pool->shared_blocks(), 1);
  EXPECT_EQ(pool->used_blocks(), 2);
  pool->Release(*blocks);
  EXPECT_EQ(pool->used_blocks(), 1);
  EXPECT_EQ(pool->ref_count((*blocks)[1]), 0);
  pool->Release({(*blocks)[0]});
  EXPECT_EQ(pool->used_blocks(), 0);
  EXPECT_EQ(pool->shared_blocks(), 0);
  EXPECT_THROW(pool->Share({(*blocks)[0]}), c10::Error) << "a free block cannot be shared";
}

TEST(KvBlockPoolTest, CopyBlockCopiesEverySlotOfKeysAndValues) {
  auto pool = Pool(4);
  ASSERT_NE(pool, nullptr);
  KvCache cache(pool, 1);
  Grow(&cache, 4);
  const int64_t from = cache.table(0)[0], to = from == 3 ? 2 : 3;
  pool->CopyBlock(from, to);
  EXPECT_EQ(pool->copies_on_write(), 1);
  c10::InferenceMode guard;
  for (const at::Tensor* store : {&pool->keys(), &pool->values()}) {
    EXPECT_TRUE(at::equal(store->narrow(0, to * kBlockTokens, kBlockTokens),
                          store->narrow(0, from * kBlockTokens, kBlockTokens)));
  }
}

TEST(KvCacheTest, AForkSharesItsSourcesBlocksAndTakesNone) {
  auto pool = Pool(16);
  ASSERT_NE(pool, nullptr);
  KvCache source(pool, 2);
  Grow(&source, 6);
  for (int64_t tokens : {6, 5, 4, 1, 0}) {
    auto fork = ForkOf(source, tokens);
    ASSERT_NE(fork, nullptr);
    const int64_t blocks = (tokens + kBlockTokens - 1) / kBlockTokens;
    EXPECT_EQ(pool->used_blocks(), 4) << tokens;
    EXPECT_EQ(fork->length(), tokens);
    EXPECT_EQ(fork->blocks_held(), 2 * blocks);
    EXPECT_EQ(fork->shared_blocks_held(), 2 * blocks);
    EXPECT_EQ(source.shared_blocks_held(), 2 * blocks);
    for (int64_t r = 0; r < 2; ++r) {
      EXPECT_EQ(fork->table(r),
                std::vector<int64_t>(source.table(r).begin(), source.table(r).begin() + blocks));
    }
    EXPECT_TRUE(at::equal(fork->Keys(), source.Keys().narrow(2, 0, tokens)));
  }
  EXPECT_EQ(source.shared_blocks_held(), 0) << "every fork released its references";
}

TEST(KvCacheTest, TheFirstWriteIntoASharedBlockCopiesThatBlockOnly) {
  auto pool = Pool(16);
  ASSERT_NE(pool, nullptr);
  KvCache source(pool, 2);
  Grow(&source, 6);
  const at::Tensor keys = source.Keys(), values = source.Values();
  auto fork = ForkOf(source, 6);
  ASSERT_NE(fork, nullptr);
  EXPECT_EQ(fork->BlocksNeeded(1), 2) << "a copy of the partial block per row";
  EXPECT_EQ(fork->BlocksNeeded(3), 4) << "and a new block per row";
  const at::Tensor k = at::randn({2, 1, kEmbed}), v = at::randn({2, 1, kEmbed});
  ASSERT_TRUE(fork->Reserve(1).ok());
  EXPECT_EQ(pool->used_blocks(), 6);
  EXPECT_EQ(pool->copies_on_write(), 2);
  for (int64_t r = 0; r < 2; ++r) {
    EXPECT_EQ(fork->table(r)[0], source.table(r)[0]) << "the full block stays shared";
    EXPECT_NE(fork->table(r)[1], source.table(r)[1]);
  }
  fork->Append(k, v);
  EXPECT_TRUE(at::equal(source.Keys(), keys)) << "the source's tokens are untouched";
  EXPECT_TRUE(at::equal(source.Values(), values));
  EXPECT_TRUE(at::equal(fork->Keys(), at::cat({keys, SplitHeads(k)}, 2)));
  EXPECT_TRUE(at::equal(fork->Values(), at::cat({values, SplitHeads(v)}, 2)));
  EXPECT_EQ(source.BlocksNeeded(1), 0) << "its partial block is its own again";
  Grow(&source, 1);
  EXPECT_EQ(pool->copies_on_write(), 2);
}

TEST(KvCacheTest, AWriteIntoASharedBlockThrowsWithNothingWritten) {
  auto pool = Pool(16);
  ASSERT_NE(pool, nullptr);
  KvCache source(pool, 2);
  Grow(&source, 8);
  source.RollbackTo(5);  // a failed step's tokens: block 1 stays reserved, and is forked below
  auto fork = ForkOf(source, 5);
  ASSERT_NE(fork, nullptr);
  const at::Tensor keys = fork->Keys();
  const at::Tensor k = at::randn({2, 1, kEmbed}), v = at::randn({2, 1, kEmbed});
  EXPECT_THROW(source.Append(k, v), c10::Error);
  EXPECT_THROW(KvBatch::Append({&source}, k, v), c10::Error);
  EXPECT_THROW(fork->Append(k, v), std::exception);
  EXPECT_EQ(source.length(), 5);
  EXPECT_EQ(fork->length(), 5);
  ASSERT_TRUE(source.Reserve(1).ok());
  KvBatch::Append({&source}, k, v);
  EXPECT_TRUE(at::equal(fork->Keys(), keys));
}

TEST(KvCacheTest, TruncateToGivesWholeBlocksBackAndRefusesOutOfRange) {
  auto pool = Pool(16);
  ASSERT_NE(pool, nullptr);
  KvCache cache(pool, 2);
  Grow(&cache, 9);
  const at::Tensor keys = cache.Keys();
  ASSERT_TRUE(cache.TruncateTo(5).ok());
  EXPECT_EQ(cache.length(), 5);
  EXPECT_EQ(cache.blocks_held(), 4);
  EXPECT_EQ(pool->used_blocks(), 4);
  EXPECT_TRUE(at::equal(cache.Keys(), keys.narrow(2, 0, 5)));
  for (int64_t bad : {6, -1}) {
    const Status s = cache.TruncateTo(bad);
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
    EXPECT_EQ(s.message(), "truncate to " + std::to_string(bad) +
                               " tokens: the cache holds 5 tokens per row (0 .. 5)");
    auto fork = cache.Fork(bad);
    EXPECT_EQ(fork.status().code(), StatusCode::kOutOfRange);
    EXPECT_EQ(fork.status().message(), "fork of " + std::to_string(bad) +
                                           " tokens: the cache holds 5 tokens per row (0 .. 5)");
  }
  EXPECT_EQ(cache.length(), 5);
  auto fork = ForkOf(cache, 5);
  ASSERT_NE(fork, nullptr);
  ASSERT_TRUE(fork->TruncateTo(3).ok());
  EXPECT_EQ(pool->used_blocks(), 4) << "a shared block just loses the fork's reference";
  EXPECT_EQ(cache.shared_blocks_held(), 2);
  ASSERT_TRUE(cache.TruncateTo(0).ok());
  EXPECT_EQ(pool->used_blocks(), 2) << "the fork's";
  fork.reset();
  EXPECT_EQ(pool->used_blocks(), 0);
}

}  // namespace kv_cache_test
}  // namespace mha
