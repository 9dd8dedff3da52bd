// The spill stores (mha/kv_spill.h) and KvCache's Spill / Restore through them: the bytes come
// back exactly (onto pages filled with NaN), the blocks go back to the pool and are taken again,
// refusals change nothing (a store's bound, a short pool), the file store refuses a directory it
// cannot write with the reason, and removes every file it wrote.
#include "mha/kv_spill.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "mha/kv_cache.h"
#include "mha/kv_layout.h"

namespace mha {
namespace kv_spill_test {

namespace fs = std::filesystem;

constexpr int64_t kHeads = 2, kHeadDim = 3, kEmbed = kHeads * kHeadDim;
constexpr int64_t kBlockTokens = 4;
constexpr int64_t kTokenBytes = 2 * kEmbed * 4;  // keys + values, float32

std::shared_ptr<KvBlockPool> Pool(int64_t blocks) {
  auto pool = KvBlockPool::Create(KvPoolOptions{blocks * kBlockTokens * kTokenBytes, kBlockTokens},
                                  KvLayout{kHeads, kHeadDim, at::kFloat, c10::Device(c10::kCPU)});
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  return pool.ok() ? *pool : nullptr;
}

void FillNaN(const KvBlockPool& pool) {
  c10::InferenceMode guard;
  pool.keys().fill_(std::numeric_limits<float>::quiet_NaN());
  pool.values().fill_(std::numeric_limits<float>::quiet_NaN());
}

void Grow(KvCache* cache, int64_t n) {
  ASSERT_TRUE(cache->Reserve(n).ok());
  cache->Append(at::randn({cache->rows(), n, kEmbed}), at::randn({cache->rows(), n, kEmbed}));
}

// A fresh directory for one test.
std::string TestDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "kv_spill_test_" + name;
  fs::remove_all(dir);
  return dir;
}

int64_t FilesIn(const std::string& dir) {
  int64_t n = 0;
  for (const auto& entry : fs::directory_iterator(dir)) n += entry.is_regular_file() ? 1 : 0;
  return n;
}

std::shared_ptr<KvSpillStore> FileStore(const std::string& dir, int64_t max_bytes) {
  auto store = FileSpillStore::Create({dir, max_bytes});
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::shared_ptr<KvSpillStore>(std::move(store.value())) : nullptr;
}

// Put, Get, Remove and the bound, the same for both stores.
void CheckStore(KvSpillStore& store) {
  const std::vector<char> ten = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  ASSERT_TRUE(store.Put("a", ten.data(), 10).ok());
  EXPECT_EQ(store.Put("a", ten.data(), 1).code(), StatusCode::kAlreadyExists);
  std::vector<char> out(10);
  ASSERT_TRUE(store.Get("a", out.data(), 10).ok());
  EXPECT_EQ(out, ten);
  EXPECT_EQ(store.Get("a", out.data(), 9).code(), StatusCode::kDataLoss);
  EXPECT_EQ(store.Get("b", out.data(), 10).code(), StatusCode::kNotFound);
  const Status over = store.Put("b", ten.data(), 7);
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.message().find("'b' needs 7 bytes, 10 of 16 held"), std::string::npos)
      << over.message();
  EXPECT_EQ(store.bytes_held(), 10);
  EXPECT_EQ(store.entries(), 1);
  store.Remove("a");
  store.Remove("a");
  EXPECT_EQ(store.bytes_held(), 0);
  EXPECT_TRUE(store.Put("b", ten.data(), 7).ok());
}

TEST(KvSpillStoreTest, HostMemoryKeepsTheBytesUnderItsBound) {
  HostSpillStore store(16);
  CheckStore(store);
}

TEST(KvSpillStoreTest, FilesKeepTheBytesUnderTheirBoundAndGoWithTheStore) {
  const std::string dir = TestDir("files");
  {
    auto store = FileStore(dir, 16);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->Describe(), "files under " + dir);
    CheckStore(*store);
    EXPECT_EQ(FilesIn(dir), 1) << "b's file, the probe removed";
  }
  EXPECT_EQ(FilesIn(dir), 0) << "the destroyed store left files";
  fs::remove_all(dir);
}

TEST(KvSpillStoreTest, AFileStoreRefusesADirItCannotWriteWithTheReason) {
  const std::string dir = TestDir("refusals");
  fs::create_directories(dir);
  const std::string file = dir + "/plain";
  std::ofstream(file) << "x";
  auto under_file = FileSpillStore::Create({file + "/spill", 1024});
  EXPECT_EQ(under_file.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(under_file.status().message().find("spill dir " + file + "/spill is not a directory"),
            std::string::npos)
      << under_file.status().message();
  EXPECT_EQ(FileSpillStore::Create({dir, 0}).status().message(),
            "spill dir " + dir + ": the byte bound must be >= 1, got 0 (--kv-spill-bytes)");
  EXPECT_EQ(FileSpillStore::Create({"", 1}).status().code(), StatusCode::kInvalidArgument);
  // sysfs takes no new file, not even root's: the probe fails (EACCES, or EROFS when mounted
  // read-only).
  auto sysfs = FileSpillStore::Create({"/sys", 1024});
  EXPECT_EQ(sysfs.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(sysfs.status().message().find("spill dir /sys is not writable: writing /sys/mha-kv-"),
            std::string::npos)
      << sysfs.status().message();
  if (geteuid() != 0) {  // root writes anywhere: the permission bits refuse only other users
    const std::string locked = dir + "/locked";
    fs::create_directories(locked);
    fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
    auto store = FileSpillStore::Create({locked, 1024});
    EXPECT_EQ(store.status().code(), StatusCode::kPermissionDenied);
    EXPECT_NE(store.status().message().find("spill dir " + locked + " is not writable"),
              std::string::npos)
        << store.status().message();
    fs::permissions(locked, fs::perms::owner_all);
  }
  fs::remove_all(dir);
}

class KvCacheSpillTest : public ::testing::TestWithParam<bool> {  // true: the file store
 protected:
  void SetUp() override {
    dir_ = TestDir(GetParam() ? "cache_files" : "cache_host");
    store_ = GetParam() ? FileStore(dir_, 4096) : std::make_shared<HostSpillStore>(4096);
    ASSERT_NE(store_, nullptr);
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(dir_);
  }
  std::string dir_;
  std::shared_ptr<KvSpillStore> store_;
};

TEST_P(KvCacheSpillTest, SpillGivesTheBlocksBackAndRestoreBringsTheBytesBackExactly) {
  auto pool = Pool(16);
  ASSERT_NE(pool, nullptr);
  KvCache cache(pool, 2);
  Grow(&cache, 7);
  const at::Tensor keys = cache.Keys(), values = cache.Values();
  ASSERT_TRUE(cache.Spill(store_, "s1").ok());
  EXPECT_TRUE(cache.spilled());
  EXPECT_EQ(cache.spilled_bytes(), 2 * 7 * kTokenBytes);
  EXPECT_EQ(store_->bytes_held(), 2 * 7 * kTokenBytes);
  EXPECT_EQ(cache.length(), 7);
  EXPECT_EQ(cache.blocks_held(), 0);
  EXPECT_EQ(pool->used_blocks(), 0);
  EXPECT_EQ(cache.BlocksNeeded(0), 4) << "the restore";
  EXPECT_EQ(cache.BlocksNeeded(2), 6);
  EXPECT_EQ(cache.Reserve(1).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(cache.Fork(1).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(cache.TruncateTo(1).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(cache.Spill(store_, "s2").code(), StatusCode::kFailedPrecondition);
  FillNaN(*pool);
  ASSERT_TRUE(cache.Restore().ok());
  EXPECT_FALSE(cache.spilled());
  EXPECT_EQ(store_->entries(), 0);
  EXPECT_EQ(pool->used_blocks(), 4);
  EXPECT_TRUE(at::equal(cache.Keys(), keys));
  EXPECT_TRUE(at::equal(cache.Values(), values));
  EXPECT_EQ(cache.Restore().code(), StatusCode::kFailedPrecondition);
  Grow(&cache, 2);
  EXPECT_TRUE(at::equal(cache.Keys().narrow(2, 0, 7), keys));
}

TEST_P(KvCacheSpillTest, RefusalsChangeNothing) {
  auto pool = Pool(6);
  ASSERT_NE(pool, nullptr);
  KvCache big(pool, 2), other(pool, 1);
  Grow(&big, 8);  // 4 blocks, 8 * 2 * 48 = 768 bytes
  const at::Tensor keys = big.Keys();
  std::vector<char> filler(4096 - 700);
  ASSERT_TRUE(store_->Put("filler", filler.data(), static_cast<int64_t>(filler.size())).ok());
  const Status over = big.Spill(store_, "big");
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.message().find("'big' needs 768 bytes, 3396 of 4096 held"), std::string::npos)
      << over.message();
  EXPECT_FALSE(big.spilled());
  EXPECT_EQ(pool->used_blocks(), 4);
  EXPECT_TRUE(at::equal(big.Keys(), keys));
  store_->Remove("filler");
  ASSERT_TRUE(big.Spill(store_, "big").ok());
  Grow(&other, 9);  // 3 of the 6 blocks: 3 free, the restore needs 4
  const Status short_pool = big.Restore();
  EXPECT_EQ(short_pool.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(short_pool.message().find("restoring the spilled KV cache 'big': KV cache full: 4 "
                                      "blocks needed, 3 of 6 free"),
            std::string::npos)
      << short_pool.message();
  EXPECT_TRUE(big.spilled());
  EXPECT_EQ(store_->entries(), 1);
  EXPECT_EQ(pool->used_blocks(), 3);
  other.Release();
  ASSERT_TRUE(big.Restore().ok());
  EXPECT_TRUE(at::equal(big.Keys(), keys));
}

TEST_P(KvCacheSpillTest, ASpilledForkLeavesTheSharedBlocksToItsSourceAndReleaseEmptiesTheStore) {
  auto pool = Pool(16);
  ASSERT_NE(pool, nullptr);
  KvCache source(pool, 1);
  Grow(&source, 6);
  auto fork = source.Fork(6);
  ASSERT_TRUE(fork.ok());
  const at::Tensor keys = (*fork)->Keys();
  ASSERT_TRUE((*fork)->Spill(store_, "fork").ok());
  EXPECT_EQ(pool->used_blocks(), 2);
  EXPECT_EQ(source.shared_blocks_held(), 0);
  Grow(&source, 1);  // in place: nobody shares its block now
  EXPECT_EQ(pool->copies_on_write(), 0);
  ASSERT_TRUE((*fork)->Restore().ok());
  EXPECT_TRUE(at::equal((*fork)->Keys(), keys));
  ASSERT_TRUE((*fork)->Spill(store_, "fork").ok());
  if (GetParam()) {
    EXPECT_EQ(FilesIn(dir_), 1);
  }
  (*fork)->Release();
  EXPECT_EQ(store_->entries(), 0);
  if (GetParam()) {
    EXPECT_EQ(FilesIn(dir_), 0);
  }
  EXPECT_EQ(pool->used_blocks(), 2);
}

INSTANTIATE_TEST_SUITE_P(Stores, KvCacheSpillTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Files" : "HostMemory"; });

}  // namespace kv_spill_test
}  // namespace mha
