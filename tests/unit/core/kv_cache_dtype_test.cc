// KvCacheDtype (mha/kv_cache_dtype.h) and what it makes of a pool: the names parse back and an
// unknown one is refused naming the field and the choices; each dtype's pool counts its real bytes
// (values, and the scales of a scaled dtype), so the same --kv-cache-bytes holds that many more
// blocks; fp8_e4m3 is refused where LibTorch or the device lacks it, saying why.
#include "mha/kv_cache_dtype.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/version.h>

#include <string>

#include "mha/kv_cache.h"
#include "mha/kv_layout.h"
#include "test_util.h"

namespace mha {
namespace kv_cache_dtype_test {

using testing::Contains;

TEST(KvCacheDtypeTest, NamesParseBackAndUnknownNamesAreRefusedWithTheChoices) {
  for (KvCacheDtype d : {KvCacheDtype::kModel, KvCacheDtype::kFloat32, KvCacheDtype::kBFloat16,
                         KvCacheDtype::kFloat16, KvCacheDtype::kInt8, KvCacheDtype::kFp8E4m3}) {
    auto parsed = ParseKvCacheDtype(KvCacheDtypeName(d), "--kv-cache-dtype");
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(KvCacheDtypeChoices(), "model, fp32, bf16, fp16, int8, fp8_e4m3");
  for (const char* bad : {"int4", "INT8", "float32", ""}) {
    auto parsed = ParseKvCacheDtype(bad, "kv_cache_dtype");
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message(),
              "kv_cache_dtype: unknown KV cache dtype '" + std::string(bad) +
                  "' (choices: model, fp32, bf16, fp16, int8, fp8_e4m3)");
  }
  EXPECT_TRUE(KvCacheDtypeScaled(KvCacheDtype::kInt8));
  EXPECT_TRUE(KvCacheDtypeScaled(KvCacheDtype::kFp8E4m3));
  EXPECT_FALSE(KvCacheDtypeScaled(KvCacheDtype::kBFloat16));
  EXPECT_FALSE(KvCacheDtypeScaled(KvCacheDtype::kModel));
}

StatusOr<std::shared_ptr<KvBlockPool>> Pool(KvCacheDtype dtype, at::ScalarType compute,
                                            int64_t bytes = int64_t{1} << 20) {
  // 4 K/V heads of 64 (D=64, the goal table's): 16-token blocks.
  return KvBlockPool::Create(KvPoolOptions{bytes, 16, dtype},
                             KvLayout{4, 64, compute, c10::Device(c10::kCPU)});
}

TEST(KvCacheDtypeTest, EachPoolCountsItsRealBytesPerToken) {
  struct Case {
    KvCacheDtype dtype;
    at::ScalarType compute, stored;
    KvCacheDtype resolved;
    int64_t bytes_per_token;
  };
  const Case cases[] = {
      {KvCacheDtype::kModel, at::kFloat, at::kFloat, KvCacheDtype::kFloat32, 2 * 4 * 64 * 4},
      {KvCacheDtype::kModel, at::kBFloat16, at::kBFloat16, KvCacheDtype::kBFloat16, 2 * 4 * 64 * 2},
      {KvCacheDtype::kModel, at::kDouble, at::kDouble, KvCacheDtype::kModel, 2 * 4 * 64 * 8},
      {KvCacheDtype::kFloat32, at::kBFloat16, at::kFloat, KvCacheDtype::kFloat32, 2 * 4 * 64 * 4},
      {KvCacheDtype::kBFloat16, at::kFloat, at::kBFloat16, KvCacheDtype::kBFloat16, 2 * 4 * 64 * 2},
      {KvCacheDtype::kFloat16, at::kFloat, at::kHalf, KvCacheDtype::kFloat16, 2 * 4 * 64 * 2},
      // int8: D codes and a float scale and zero per token and K/V head, for keys and values.
      {KvCacheDtype::kInt8, at::kFloat, at::kChar, KvCacheDtype::kInt8, 2 * 4 * (64 + 8)},
  };
  const int64_t bytes = int64_t{1} << 20;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(KvCacheDtypeName(c.dtype)) + " for a " + c10::toString(c.compute) +
                 " model");
    auto pool = Pool(c.dtype, c.compute, bytes);
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    const KvBlockPool& p = **pool;
    EXPECT_EQ(p.cache_dtype(), c.resolved);
    EXPECT_EQ(p.keys().scalar_type(), c.stored);
    EXPECT_EQ(p.values().scalar_type(), c.stored);
    EXPECT_EQ(p.layout().dtype, c.compute) << "readers get the model's dtype";
    EXPECT_EQ(p.bytes_per_token(), c.bytes_per_token);
    EXPECT_EQ(p.block_bytes(), 16 * c.bytes_per_token);
    EXPECT_EQ(p.total_blocks(), bytes / (16 * c.bytes_per_token));
    const int64_t allocated =
        p.keys().nbytes() + p.values().nbytes() +
        (p.scaled() ? p.key_scales().nbytes() + p.value_scales().nbytes() : 0);
    EXPECT_EQ(allocated, p.total_blocks() * p.block_bytes()) << "the bytes counted are allocated";
    EXPECT_EQ(p.key_scales().defined(), c.dtype == KvCacheDtype::kInt8);
  }
  // D=64: 3.5x the tokens of float32 in int8 (2048 / 576 bytes a token), 2x in bfloat16.
  EXPECT_EQ(Pool(KvCacheDtype::kInt8, at::kFloat).value()->total_blocks(), 113);
  EXPECT_EQ(Pool(KvCacheDtype::kFloat32, at::kFloat).value()->total_blocks(), 32);
  EXPECT_EQ(Pool(KvCacheDtype::kBFloat16, at::kFloat).value()->total_blocks(), 64);
}

TEST(KvCacheDtypeTest, APoolTooSmallForOneBlockNamesItsBytesPerToken) {
  auto none = Pool(KvCacheDtype::kInt8, at::kFloat, 100);
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(none.status().message(),
            "--kv-cache-bytes 100 holds no block: one block of 16 tokens takes 9216 bytes (2 * 4 "
            "KV heads * (head_dim 64 * 1 + 8 bytes of scale and zero) bytes per token, KV cache "
            "dtype int8)");
}

TEST(KvCacheDtypeTest, Fp8IsRefusedWhereLibTorchOrTheDeviceLacksItSayingWhy) {
  auto pool = Pool(KvCacheDtype::kFp8E4m3, at::kFloat);
  ASSERT_FALSE(pool.ok()) << "a CPU pool never holds float8";
  EXPECT_EQ(pool.status().code(), StatusCode::kFailedPrecondition);
  const std::string& why = pool.status().message();
  EXPECT_TRUE(Contains(why, "KV cache dtype fp8_e4m3: ")) << why;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  EXPECT_TRUE(Contains(why, "the pool is on the CPU")) << why;
#else
  EXPECT_TRUE(Contains(
      why, std::string("this build's LibTorch ") + TORCH_VERSION + " has no float8_e4m3fn dtype"))
      << why;
#endif
}

}  // namespace kv_cache_dtype_test
}  // namespace mha
