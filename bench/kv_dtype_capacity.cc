// How many sessions fit a fixed --kv-cache-bytes in each KV cache dtype (docs/kv_cache_dtypes.md):
// pools of 256 MiB in 16-token blocks for a one-layer model's 8 heads and a Llama layer's 4 K/V
// heads, both head_dim 64; sessions of one sequence reserving 512 tokens each until the pool
// refuses (KvCache::Reserve: RESOURCE_EXHAUSTED). One markdown table, the ratio to float32 beside.
#include <ATen/ATen.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "mha/kv_cache.h"
#include "mha/kv_layout.h"

namespace {

constexpr int64_t kBytes = int64_t{256} << 20, kTokens = 512;

int64_t SessionsThatFit(int64_t heads, mha::KvCacheDtype dtype, int64_t* bytes_per_token) {
  auto pool = mha::KvBlockPool::Create(
      {kBytes, 16, dtype}, mha::KvLayout{heads, 64, at::kFloat, c10::Device(c10::kCPU)});
  TORCH_CHECK(pool.ok(), pool.status().ToString());
  *bytes_per_token = (*pool)->bytes_per_token();
  std::vector<std::unique_ptr<mha::KvCache>> sessions;
  while (true) {
    auto cache = std::make_unique<mha::KvCache>(*pool, 1);
    if (!cache->Reserve(kTokens).ok()) break;
    sessions.push_back(std::move(cache));
  }
  return static_cast<int64_t>(sessions.size());
}

}  // namespace

int main() {
  std::printf(
      "| layer (K/V heads x D=64) | dtype | bytes/token | sessions of %lld tokens in %lld MiB "
      "| vs fp32 |\n|---|---|---|---|---|\n",
      static_cast<long long>(kTokens), static_cast<long long>(kBytes >> 20));
  for (int64_t heads : {8, 4}) {
    int64_t unused = 0;
    const int64_t fp32 = SessionsThatFit(heads, mha::KvCacheDtype::kFloat32, &unused);
    for (mha::KvCacheDtype d : {mha::KvCacheDtype::kFloat32, mha::KvCacheDtype::kBFloat16,
                                mha::KvCacheDtype::kFloat16, mha::KvCacheDtype::kInt8}) {
      int64_t bytes = 0;
      const int64_t n = SessionsThatFit(heads, d, &bytes);
      std::printf("| %s %lld | %s | %lld | %lld | %.2fx |\n", heads == 8 ? "one-layer" : "llama",
                  static_cast<long long>(heads), mha::KvCacheDtypeName(d),
                  static_cast<long long>(bytes), static_cast<long long>(n),
                  static_cast<double>(n) / static_cast<double>(fp32));
    }
  }
  return 0;
}
