// PagedAttention (mha/paged_attention.h) over grouped-query pages: query heads H over K/V heads
// KV for H / KV = 1 (MHA), 2, 4 and H (one K/V head), head sizes that fill the kernel's 8-float
// vectors and 64-float registers and ones that leave tails, caches crossing block edges with their
// blocks interleaved in the pool, 1 and 3 new tokens per item (causal within them). Each item's
// rows equal the causal attention of its queries over the keys and values it appended, computed
// here in float64 with the K/V heads repeated (Hugging Face's repeat_kv), within 1e-5. A pass split
// over several threads gives the one-thread pass's bits.
#include "mha/paged_attention.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "mha/kv_cache.h"
#include "mha/kv_layout.h"
#include "mha/runtime.h"
#include "test_util.h"

namespace mha {
namespace paged_attention_test {

struct GqaCase {
  int64_t heads, kv_heads, head_dim, block_tokens;
};

std::ostream& operator<<(std::ostream& os, const GqaCase& c) {
  return os << "H" << c.heads << "_KV" << c.kv_heads << "_D" << c.head_dim << "_bt"
            << c.block_tokens;
}

// softmax(q k^T / sqrt(D) + causal) v in float64: q [T, H * D], k and v [S, KV * D] (the last T
// keys the queries' own). Returns [T, H * D].
at::Tensor Reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const GqaCase& c) {
  const int64_t t = q.size(0), s = k.size(0), d = c.head_dim, group = c.heads / c.kv_heads;
  const at::Tensor qh = q.to(at::kDouble).view({t, c.heads, d}).transpose(0, 1);  // [H, T, D]
  auto heads = [&](const at::Tensor& x) {  // [S, KV * D] -> [H, S, D], K/V head h / group
    return x.to(at::kDouble).view({s, c.kv_heads, d}).transpose(0, 1).repeat_interleave(group, 0);
  };
  at::Tensor scores = at::matmul(qh, heads(k).transpose(1, 2)) / std::sqrt(double(d));
  const at::Tensor hidden =
      at::ones({t, s}, at::kBool).triu(s - t + 1);  // query i sees keys [0, S - T + i]
  scores = scores.masked_fill(hidden, -INFINITY).softmax(-1);
  return at::matmul(scores, heads(v)).transpose(0, 1).reshape({t, c.heads * d});
}

class PagedAttentionGqaTest : public ::testing::TestWithParam<GqaCase> {};

TEST_P(PagedAttentionGqaTest, EqualsCausalAttentionOverRepeatedKvHeads) {
  const GqaCase c = GetParam();
  const int64_t bt = c.block_tokens, kv_dim = c.kv_heads * c.head_dim;
  auto pool = KvBlockPool::Create({int64_t{8} << 20, bt}, KvLayout{c.kv_heads, c.head_dim});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  at::manual_seed(46);
  for (const int64_t tokens : {1, 3}) {
    SCOPED_TRACE("tokens " + std::to_string(tokens));
    // Cached lengths before the step: inside one block, at and across its edges, several blocks.
    const std::vector<int64_t> cached = {0, bt - 1, bt, bt + 1, 3 * bt + 2};
    std::vector<std::unique_ptr<KvCache>> caches;
    std::vector<at::Tensor> keys, values;
    for (const int64_t n : cached) {
      caches.push_back(std::make_unique<KvCache>(*pool, 1));
      keys.push_back(at::randn({n + tokens, kv_dim}));
      values.push_back(at::randn({n + tokens, kv_dim}));
    }
    // One token per cache in turn: the caches' blocks interleave in the pool.
    for (int64_t p = 0;; ++p) {
      bool any = false;
      for (size_t i = 0; i < caches.size(); ++i) {
        if (p >= keys[i].size(0)) continue;
        any = true;
        ASSERT_TRUE(caches[i]->Reserve(1).ok());
        caches[i]->Append(keys[i].narrow(0, p, 1).unsqueeze(0),
                          values[i].narrow(0, p, 1).unsqueeze(0));
      }
      if (!any) break;
    }
    std::vector<PagedItem> items;
    for (const auto& cache : caches) items.push_back(PagedItem{cache.get(), tokens, true});
    const auto n = static_cast<int64_t>(caches.size());
    const at::Tensor q = at::randn({n * tokens, c.heads * c.head_dim});
    const at::Tensor out = PagedAttention(**pool, c.heads, items, q);
    for (int64_t i = 0; i < n; ++i) {
      SCOPED_TRACE("cached " + std::to_string(cached[static_cast<size_t>(i)]));
      const auto u = static_cast<size_t>(i);
      EXPECT_TRUE(testing::TensorsNear(
          out.narrow(0, i * tokens, tokens),
          Reference(q.narrow(0, i * tokens, tokens), keys[u], values[u], c).to(at::kFloat),
          testing::kFp32Tolerance));
    }
  }
}

// A pass big enough to share (Llama's shape at cache 512: 32 sessions, KV=4 of D=64) on 1, 2 and 4
// threads (PassThreads): each (session, K/V head) is computed whole by one thread with the
// one-thread pass's arithmetic, so the answers are the same bits, for float32 and int8 pages.
TEST(PagedAttentionThreadsTest, EveryThreadCountGivesTheOneThreadPassesBits) {
  for (KvCacheDtype dtype : {KvCacheDtype::kFloat32, KvCacheDtype::kInt8}) {
    SCOPED_TRACE(KvCacheDtypeName(dtype));
    auto pool = KvBlockPool::Create({int64_t{64} << 20, 16, dtype}, KvLayout{4, 64});
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    at::manual_seed(47);
    std::vector<std::unique_ptr<KvCache>> caches;
    std::vector<PagedItem> items;
    for (int i = 0; i < 32; ++i) {
      caches.push_back(std::make_unique<KvCache>(*pool, 1));
      const int64_t n = 480 + 3 * i;  // lengths differ: runs of unequal work
      ASSERT_TRUE(caches.back()->Reserve(n).ok());
      caches.back()->Append(at::randn({1, n, 256}), at::randn({1, n, 256}));
      items.push_back(PagedItem{caches.back().get(), 1, true});
    }
    const at::Tensor q = at::randn({32, 16 * 64});
    at::Tensor one;
    {
      ScopedPassThreads threads(1);
      one = PagedAttention(**pool, 16, items, q);
    }
    for (int n : {2, 4}) {
      ScopedPassThreads threads(n);
      EXPECT_EQ(PassThreads(), n);
      EXPECT_TRUE(at::equal(PagedAttention(**pool, 16, items, q), one)) << n << " threads";
    }
    EXPECT_EQ(PassThreads(), 1) << "put back";
  }
}

INSTANTIATE_TEST_SUITE_P(Groups, PagedAttentionGqaTest,
                         ::testing::Values(GqaCase{8, 8, 64, 16},   // H / KV = 1 (MHA)
                                           GqaCase{8, 4, 12, 5},    // 2, a head of 8 + 4 floats
                                           GqaCase{16, 4, 64, 16},  // 4: the roofline row's shape
                                           GqaCase{8, 2, 40, 3},    // 4, 32 + 8 floats
                                           GqaCase{8, 1, 16, 4},    // H (one K/V head)
                                           GqaCase{4, 4, 7, 2}),    // 1, no full vector
                         [](const auto& info) {
                           std::ostringstream name;
                           name << info.param;
                           return name.str();
                         });

}  // namespace paged_attention_test
}  // namespace mha
