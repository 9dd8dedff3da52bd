// KvCache (mha/kv_cache.h) in each cache dtype (fp32, bf16, fp16, int8): appended rows read back
// as their encoding decodes (Keys / Values in the model's dtype); KvBatch's one-op append writes
// the same bytes (codes and scales) as the per-cache append and its gather reads the same values;
// a fork's copy-on-write, a truncate, and a spill and restore through either store move blocks as
// bytes: what they hold afterwards is bit for bit what was there (never re-encoded).
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "decode_test_util.h"
#include "kv/kv_quant.h"
#include "mha/kv_batch.h"
#include "mha/kv_cache.h"
#include "mha/kv_layout.h"
#include "mha/kv_spill.h"

namespace mha {
namespace kv_cache_quantized_test {

constexpr int64_t kHeads = 2, kHeadDim = 12, kEmbed = kHeads * kHeadDim;  // D: 8 + a tail
constexpr int64_t kBlockTokens = 4;

class KvCacheQuantizedTest : public ::testing::TestWithParam<KvCacheDtype> {
 protected:
  std::shared_ptr<KvBlockPool> Pool(int64_t blocks = 32) {
    const KvLayout layout{kHeads, kHeadDim, at::kFloat, c10::Device(c10::kCPU)};
    auto probe =
        KvBlockPool::Create(KvPoolOptions{int64_t{1} << 20, kBlockTokens, GetParam()}, layout);
    EXPECT_TRUE(probe.ok()) << probe.status().ToString();
    if (!probe.ok()) return nullptr;
    auto pool = KvBlockPool::Create(
        KvPoolOptions{blocks * (*probe)->block_bytes(), kBlockTokens, GetParam()}, layout);
    EXPECT_TRUE(pool.ok() && (*pool)->total_blocks() == blocks);
    testing::FillNaN(**pool);
    return *pool;
  }
  // x [rows, T, E] as the cache gives it back: encoded, decoded, in split_heads layout.
  at::Tensor Expected(const at::Tensor& x) const {
    const at::Tensor& stored = pool_stored_;
    const int64_t rows = x.size(0), t = x.size(1);
    const internal::EncodedKv e =
        internal::EncodeKv(x.reshape({rows * t, kHeads, kHeadDim}), stored.scalar_type());
    return internal::DecodeKv(e.codes, e.scales, at::kFloat)
        .view({rows, t, kHeads, kHeadDim})
        .transpose(1, 2);
  }
  void SetUp() override {
    auto pool = Pool(1);
    ASSERT_NE(pool, nullptr);
    pool_stored_ = pool->keys();
  }
  at::Tensor pool_stored_;
};

// What every store of the pool holds at `cache`'s positions, row by row: [rows * length, H, x]
// each (keys, values, and the scales of a scaled pool).
std::vector<at::Tensor> Raw(const KvCache& cache) {
  const KvBlockPool& pool = cache.pool();
  std::vector<int64_t> slots;
  for (int64_t r = 0; r < cache.rows(); ++r) {
    for (int64_t p = 0; p < cache.length(); ++p) {
      slots.push_back(cache.table(r).at(static_cast<size_t>(p / kBlockTokens)) * kBlockTokens +
                      p % kBlockTokens);
    }
  }
  const at::Tensor index = at::tensor(slots, at::kLong);
  std::vector<at::Tensor> out;
  c10::InferenceMode guard;
  for (const at::Tensor* t :
       {&pool.keys(), &pool.values(), &pool.key_scales(), &pool.value_scales()}) {
    if (t->defined()) out.push_back(t->index_select(0, index));
  }
  return out;
}

void ExpectSameBytes(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(at::equal(a[i], b[i])) << "store " << i << " differs";
  }
}

TEST_P(KvCacheQuantizedTest, AppendedRowsReadBackAsTheirEncodingDecodes) {
  auto pool = Pool();
  ASSERT_NE(pool, nullptr);
  KvCache other(pool, 1), cache(pool, 2);
  at::manual_seed(3);
  const at::Tensor k = at::randn({2, 9, kEmbed}) * 3, v = at::randn({2, 9, kEmbed});
  int64_t p = 0;
  for (int64_t n : {1, 5, 3}) {  // crosses both block boundaries, strided views
    ASSERT_TRUE(cache.Reserve(n).ok());
    ASSERT_TRUE(other.Reserve(n).ok());
    cache.Append(k.narrow(1, p, n), v.narrow(1, p, n));
    other.Append(at::zeros({1, n, kEmbed}), at::zeros({1, n, kEmbed}));
    p += n;
  }
  EXPECT_EQ(cache.Keys().scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(cache.Keys(), Expected(k)));
  EXPECT_TRUE(at::equal(cache.Values(), Expected(v)));
  EXPECT_TRUE(at::equal(other.Keys(), at::zeros({1, kHeads, 9, kHeadDim})));
  if (GetParam() == KvCacheDtype::kFloat32) {  // exactly what was appended
    EXPECT_TRUE(at::equal(cache.Keys(), k.view({2, 9, kHeads, kHeadDim}).transpose(1, 2)));
  }
}

TEST_P(KvCacheQuantizedTest, BatchedAppendsAndGathersEqualThePerCacheOnes) {
  auto pool = Pool();
  ASSERT_NE(pool, nullptr);
  std::vector<std::unique_ptr<KvCache>> mine, batched;
  std::vector<KvCache*> writers;
  std::vector<const KvCache*> readers;
  at::manual_seed(4);
  for (int64_t n : {5, 2, 7}) {
    mine.push_back(std::make_unique<KvCache>(pool, 2));
    batched.push_back(std::make_unique<KvCache>(pool, 2));
    const at::Tensor k = at::randn({2, n, kEmbed}), v = at::randn({2, n, kEmbed});
    for (auto* c : {mine.back().get(), batched.back().get()}) {
      ASSERT_TRUE(c->Reserve(n + 1).ok());
      c->Append(k, v);
    }
    writers.push_back(batched.back().get());
    readers.push_back(batched.back().get());
  }
  const at::Tensor k = at::randn({6, 1, kEmbed}), v = at::randn({6, 1, kEmbed});
  KvBatch::Append(writers, k, v);
  for (size_t i = 0; i < mine.size(); ++i) {
    mine[i]->Append(k.narrow(0, 2 * i, 2), v.narrow(0, 2 * i, 2));
    ExpectSameBytes(Raw(*batched[i]), Raw(*mine[i]));
  }
  const KvBatch::Padded padded = KvBatch::Gather(readers);
  for (size_t i = 0; i < mine.size(); ++i) {
    const int64_t n = mine[i]->length();
    EXPECT_TRUE(at::equal(padded.keys.narrow(0, 2 * i, 2).narrow(2, 0, n), mine[i]->Keys()));
    EXPECT_TRUE(at::equal(padded.values.narrow(0, 2 * i, 2).narrow(2, 0, n), mine[i]->Values()));
  }
}

TEST_P(KvCacheQuantizedTest, ForksCopyOnWriteAndTruncateMoveBytesExactly) {
  auto pool = Pool();
  ASSERT_NE(pool, nullptr);
  KvCache source(pool, 2);
  ASSERT_TRUE(source.Reserve(6).ok());
  source.Append(at::randn({2, 6, kEmbed}) * 5, at::randn({2, 6, kEmbed}));
  const std::vector<at::Tensor> before = Raw(source);
  const at::Tensor keys = source.Keys(), values = source.Values();
  auto fork = source.Fork(6);
  ASSERT_TRUE(fork.ok());
  ASSERT_TRUE((*fork)->Reserve(1).ok());  // the half-full shared block is copied
  EXPECT_EQ(pool->copies_on_write(), 2);
  EXPECT_NE((*fork)->table(0)[1], source.table(0)[1]);
  ExpectSameBytes(Raw(**fork), before);
  (*fork)->Append(at::randn({2, 1, kEmbed}), at::randn({2, 1, kEmbed}));
  EXPECT_TRUE(at::equal((*fork)->Keys().narrow(2, 0, 6), keys));
  EXPECT_TRUE(at::equal((*fork)->Values().narrow(2, 0, 6), values));
  ExpectSameBytes(Raw(source), before);
  ASSERT_TRUE(source.TruncateTo(3).ok());
  EXPECT_TRUE(at::equal(source.Keys(), keys.narrow(2, 0, 3)));
  EXPECT_TRUE(at::equal(source.Values(), values.narrow(2, 0, 3)));
}

TEST_P(KvCacheQuantizedTest, SpillAndRestoreBringTheBytesBackExactlyThroughEitherStore) {
  namespace fs = std::filesystem;
  const std::string dir = ::testing::TempDir() + "kv_cache_quantized_spill";
  fs::remove_all(dir);
  auto files = FileSpillStore::Create({dir, int64_t{1} << 20});
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  for (std::shared_ptr<KvSpillStore> store :
       {std::shared_ptr<KvSpillStore>(std::make_shared<HostSpillStore>()),
        std::shared_ptr<KvSpillStore>(std::move(files.value()))}) {
    SCOPED_TRACE(store->Describe());
    auto pool = Pool();
    ASSERT_NE(pool, nullptr);
    KvCache cache(pool, 2);
    ASSERT_TRUE(cache.Reserve(7).ok());
    cache.Append(at::randn({2, 7, kEmbed}) * 2, at::randn({2, 7, kEmbed}));
    const std::vector<at::Tensor> before = Raw(cache);
    const at::Tensor keys = cache.Keys(), values = cache.Values();
    ASSERT_TRUE(cache.Spill(store, "s").ok());
    EXPECT_EQ(cache.spilled_bytes(), 2 * 7 * pool->bytes_per_token());
    EXPECT_EQ(store->bytes_held(), 2 * 7 * pool->bytes_per_token());
    testing::FillNaN(*pool);  // every page: the restore must bring every byte back
    {
      c10::InferenceMode guard;
      pool->keys().fill_(1);  // codes too (an int8 pool's NaN fill leaves them)
      pool->values().fill_(1);
    }
    ASSERT_TRUE(cache.Restore().ok());
    EXPECT_EQ(store->entries(), 0);
    ExpectSameBytes(Raw(cache), before);
    EXPECT_TRUE(at::equal(cache.Keys(), keys));
    EXPECT_TRUE(at::equal(cache.Values(), values));
  }
  fs::remove_all(dir);
}

std::string DtypeName(const ::testing::TestParamInfo<KvCacheDtype>& info) {
  return KvCacheDtypeName(info.param);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, KvCacheQuantizedTest,
                         ::testing::Values(KvCacheDtype::kFloat32, KvCacheDtype::kBFloat16,
                                           KvCacheDtype::kFloat16, KvCacheDtype::kInt8),
                         DtypeName);

}  // namespace kv_cache_quantized_test
}  // namespace mha
