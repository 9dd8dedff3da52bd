// A KV cache's tokens as bytes and back (mha/kv_export.h): the exported bytes are exactly the
// cache's keys and values at those positions (keys then values, each [rows, count, H, D]); imported
// block by block into a cache on a pool of another block size, they give back exactly the same keys
// and values, in every cache dtype (int8's codes and scales copied, never re-encoded); a fork's
// tokens export like its source's; refusals name the numbers and change nothing.
#include "mha/kv_export.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "mha/kv_cache.h"
#include "mha/kv_layout.h"

namespace mha {
namespace kv_export_test {

constexpr int64_t kHeads = 2, kHeadDim = 3, kEmbed = kHeads * kHeadDim;

std::shared_ptr<KvBlockPool> Pool(int64_t blocks, int64_t block_tokens,
                                  at::ScalarType dtype = at::kFloat,
                                  KvCacheDtype cache = KvCacheDtype::kModel) {
  const int64_t token = KvCacheDtypeScaled(cache)
                            ? 2 * kEmbed + 2 * kHeads * 8
                            : 2 * kEmbed * static_cast<int64_t>(c10::elementSize(dtype));
  KvPoolOptions options{blocks * block_tokens * token, block_tokens};
  options.dtype = cache;
  auto pool =
      KvBlockPool::Create(options, KvLayout{kHeads, kHeadDim, dtype, c10::Device(c10::kCPU)});
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  return pool.ok() ? *pool : nullptr;
}

void Grow(KvCache* cache, int64_t n) {
  ASSERT_TRUE(cache->Reserve(n).ok());
  const auto dtype = cache->pool().layout().dtype;
  cache->Append(at::randn({cache->rows(), n, kEmbed}).to(dtype),
                at::randn({cache->rows(), n, kEmbed}).to(dtype));
}

std::vector<char> Export(const KvCache& cache, int64_t begin, int64_t count) {
  std::vector<char> bytes(
      static_cast<size_t>(cache.rows() * count * cache.pool().bytes_per_token()));
  const Status s = ExportKvTokens(cache, begin, count, bytes.data());
  EXPECT_TRUE(s.ok()) << s.ToString();
  return bytes;
}

TEST(KvExport, TheBytesAreTheCachesKeysAndValues) {
  c10::InferenceMode guard;
  KvCache cache(Pool(16, 4), 2);
  Grow(&cache, 5);
  Grow(&cache, 6);  // 11 tokens over 3 blocks per row
  std::vector<char> bytes = Export(cache, 3, 6);
  const at::Tensor got = at::from_blob(bytes.data(), {2, 2, 6, kHeads, kHeadDim}, at::kFloat);
  EXPECT_TRUE(at::equal(got[0], cache.Keys().narrow(2, 3, 6).transpose(1, 2)));
  EXPECT_TRUE(at::equal(got[1], cache.Values().narrow(2, 3, 6).transpose(1, 2)));
}

TEST(KvExport, ImportedBlockByBlockOnAnotherBlockSizeItIsTheSameCache) {
  c10::InferenceMode guard;
  for (const auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    auto pool = Pool(16, 4, dtype);
    KvCache source(pool, 3);
    Grow(&source, 10);
    KvCache copy(Pool(16, 3, dtype), 3);
    for (int64_t begin = 0; begin < 10; begin += 4) {
      const int64_t n = std::min<int64_t>(4, 10 - begin);
      const std::vector<char> bytes = Export(source, begin, n);
      ASSERT_TRUE(ImportKvTokens(&copy, bytes.data(), n).ok());
    }
    EXPECT_EQ(copy.length(), 10);
    EXPECT_TRUE(at::equal(copy.Keys(), source.Keys())) << KvDtypeName(*pool);
    EXPECT_TRUE(at::equal(copy.Values(), source.Values())) << KvDtypeName(*pool);
  }
  EXPECT_EQ(KvDtypeName(*Pool(1, 1, at::kFloat)), "float32");
  EXPECT_EQ(KvDtypeName(*Pool(1, 1, at::kHalf)), "float16");
  EXPECT_EQ(KvDtypeName(*Pool(1, 1, at::kBFloat16)), "bfloat16");
}

TEST(KvExport, AnInt8CacheComesBackWithItsCodesAndScales) {
  c10::InferenceMode guard;
  auto pool = Pool(16, 4, at::kFloat, KvCacheDtype::kInt8);
  ASSERT_TRUE(pool->scaled());
  EXPECT_EQ(KvDtypeName(*pool), "int8");
  EXPECT_EQ(KvElementBytes(*pool), 1);
  EXPECT_EQ(KvElementBytes(*Pool(1, 1, at::kHalf)), 2);
  KvCache source(pool, 2);
  Grow(&source, 9);
  KvCache copy(Pool(16, 3, at::kFloat, KvCacheDtype::kInt8), 2);
  for (int64_t begin = 0; begin < 9; begin += 5) {
    const int64_t n = std::min<int64_t>(5, 9 - begin);
    const std::vector<char> bytes = Export(source, begin, n);
    EXPECT_EQ(static_cast<int64_t>(bytes.size()), 2 * n * (2 * kEmbed + 2 * kHeads * 8));
    ASSERT_TRUE(ImportKvTokens(&copy, bytes.data(), n).ok());
  }
  EXPECT_TRUE(at::equal(copy.Keys(), source.Keys()));
  EXPECT_TRUE(at::equal(copy.Values(), source.Values()));
  EXPECT_EQ(Export(copy, 0, 9), Export(source, 0, 9));
}

TEST(KvExport, AForksSharedTokensExportLikeItsSources) {
  c10::InferenceMode guard;
  KvCache source(Pool(16, 4), 1);
  Grow(&source, 8);
  auto fork = source.Fork(6);
  ASSERT_TRUE(fork.ok());
  Grow(fork->get(), 3);  // copy-on-write of the second block
  EXPECT_EQ(Export(**fork, 0, 6), Export(source, 0, 6));
}

TEST(KvExport, RefusalsNameTheNumbersAndChangeNothing) {
  c10::InferenceMode guard;
  KvCache cache(Pool(2, 4), 1);
  Grow(&cache, 3);
  std::vector<char> bytes(1024);
  const Status past = ExportKvTokens(cache, 2, 2, bytes.data());
  EXPECT_EQ(past.code(), StatusCode::kOutOfRange);
  EXPECT_NE(past.message().find("tokens 2 .. 4: the cache holds 3 tokens per row"),
            std::string::npos)
      << past.message();
  const Status full = ImportKvTokens(&cache, bytes.data(), 8);
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted) << full.ToString();
  EXPECT_EQ(cache.length(), 3);
  EXPECT_EQ(cache.blocks_held(), 1);
}

}  // namespace kv_export_test
}  // namespace mha
