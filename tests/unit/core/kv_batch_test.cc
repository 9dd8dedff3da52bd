// KvBatch (mha/kv_batch.h): several caches' appends and gathers in one op each equal the
// per-cache KvCache::Append and Keys/Values, with the padding zero even over pages holding NaN.
#include "mha/kv_batch.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "decode_test_util.h"
#include "test_util.h"

namespace mha {
namespace kv_batch_test {

using testing::TensorsNear;

// Caches of 2 rows each at the given lengths, in a pool of 4-token blocks whose pages start as
// NaN (a page's unwritten slots must never reach an answer), filled from random rows.
struct Caches {
  std::shared_ptr<KvBlockPool> pool;
  std::vector<std::unique_ptr<KvCache>> owned;
  std::vector<KvCache*> all;
  std::vector<const KvCache*> read;
};

Caches Make(const MhaModel& model, const std::vector<int64_t>& lengths) {
  Caches c;
  c.pool = testing::MakeKvPool(model);
  testing::FillNaN(*c.pool);
  const int64_t e = model.options().embed_dim;
  for (int64_t n : lengths) {
    c.owned.push_back(std::make_unique<KvCache>(c.pool, 2));
    EXPECT_TRUE(c.owned.back()->Reserve(n + 1).ok());
    if (n > 0) c.owned.back()->Append(at::randn({2, n, e}), at::randn({2, n, e}));
    c.all.push_back(c.owned.back().get());
    c.read.push_back(c.owned.back().get());
  }
  return c;
}

std::shared_ptr<MhaModel> Model() {
  auto c = testing::LoadFixtureCase("decode_causal");
  EXPECT_TRUE(c.ok());
  return c.ok() ? testing::LoadCaseModel(*c, "cpu") : nullptr;
}

TEST(KvBatch, GatherPadsEveryRowToTheLongestWithZerosOverStalePages) {
  auto model = Model();
  ASSERT_NE(model, nullptr);
  Caches c = Make(*model, {5, 0, 9, 1});  // partly filled blocks, an empty cache, a block edge
  const KvBatch::Padded kv = KvBatch::Gather(c.read);
  EXPECT_EQ(kv.longest, 9);
  EXPECT_TRUE(at::equal(kv.lengths, at::tensor({5, 5, 0, 0, 9, 9, 1, 1}, at::kLong)));
  int64_t row = 0;
  for (const KvCache* cache : c.read) {
    const int64_t n = cache->length(), pad = kv.longest - n;
    for (const auto& [padded, own] :
         {std::pair{kv.keys, cache->Keys()}, std::pair{kv.values, cache->Values()}}) {
      const at::Tensor mine = padded.narrow(0, row, 2);
      EXPECT_TRUE(at::equal(mine.narrow(2, 0, n), own)) << "rows " << row;
      EXPECT_TRUE(at::equal(mine.narrow(2, n, pad), at::zeros_like(mine.narrow(2, n, pad))))
          << "rows " << row << ": the padding must be zero, not the pages' NaN";
    }
    row += 2;
  }
}

TEST(KvBatch, AppendWritesEveryCacheAsItsOwnAppendWould) {
  auto model = Model();
  ASSERT_NE(model, nullptr);
  const std::vector<int64_t> lengths{3, 0, 4};
  Caches batched = Make(*model, lengths), each = Make(*model, lengths);
  const int64_t e = model->options().embed_dim;
  const at::Tensor k = at::randn({6, 1, e}), v = at::randn({6, 1, e});
  KvBatch::Append(batched.all, k, v);
  for (size_t i = 0; i < each.all.size(); ++i) {
    const int64_t r = static_cast<int64_t>(i) * 2;
    each.all[i]->Append(k.narrow(0, r, 2), v.narrow(0, r, 2));
  }
  for (size_t i = 0; i < lengths.size(); ++i) {
    SCOPED_TRACE("cache " + std::to_string(i));
    EXPECT_EQ(batched.all[i]->length(), lengths[i] + 1);
    // The prefix came from different random rows (Make); the appended token must match.
    EXPECT_TRUE(TensorsNear(batched.all[i]->Keys().narrow(2, lengths[i], 1),
                            each.all[i]->Keys().narrow(2, lengths[i], 1), 0));
    EXPECT_TRUE(TensorsNear(batched.all[i]->Values().narrow(2, lengths[i], 1),
                            each.all[i]->Values().narrow(2, lengths[i], 1), 0));
  }
}

TEST(KvBatch, RowsThatDoNotMatchTheCachesThrowWithNothingAppended) {
  auto model = Model();
  ASSERT_NE(model, nullptr);
  Caches c = Make(*model, {2, 3});
  const int64_t e = model->options().embed_dim;
  EXPECT_THROW(KvBatch::Append(c.all, at::randn({3, 1, e}), at::randn({3, 1, e})), c10::Error);
  EXPECT_EQ(c.all[0]->length(), 2);
  EXPECT_EQ(c.all[1]->length(), 3);
}

}  // namespace kv_batch_test
}  // namespace mha
