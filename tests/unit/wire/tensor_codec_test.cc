// tensor_codec on its own: header checks before Torch (overflow-safe), BOOL bytes, round trips
// for every wire dtype, borrowed decoding.
#include "proto/wire/tensor_codec.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "wire_tensors.h"

namespace mha::testing {
namespace {

TEST(TensorCodec, ChecksHappenBeforeDecodingWithPreciseMessages) {
  v1::Tensor t = WireFloat({2, 5, 16}, 0.f, 100);
  auto decoded = codec::DecodeTensor(t, "query");
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(decoded.status().message(),
            "query: data has 100 bytes, shape [2, 5, 16] float32 needs 640");

  t = WireFloat({1, 1, 1});
  t.set_shape(0, int64_t{1} << 62);
  t.set_shape(1, 4);
  EXPECT_NE(codec::CheckTensor(t, "key").message().find("64 bits"), std::string::npos);
  t.set_shape(1, 1);
  t.set_shape(0, (int64_t{1} << 62) + 1);  // element count fits, bytes (x4) do not
  EXPECT_NE(codec::CheckTensor(t, "key").message().find("bytes than fit in 64 bits"),
            std::string::npos);

  t = WireBool({3}, 1);
  t.mutable_data()->at(2) = 7;
  decoded = codec::DecodeTensor(t, "attn_mask");
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().message(), "attn_mask: BOOL element 2 is 7 (must be 0 or 1)");
}

TEST(TensorCodec, RoundTripsEveryWireDtype) {
  const at::Tensor source = at::randn({2, 3, 4});
  for (auto dtype : {v1::FLOAT32, v1::FLOAT16, v1::BFLOAT16, v1::BOOL, v1::INT32, v1::INT64}) {
    v1::Tensor wire;
    const bool integral = dtype == v1::INT32 || dtype == v1::INT64;  // top-k indices
    const at::Tensor input = dtype == v1::BOOL ? source.gt(0)
                             : integral        ? (source * 100).to(at::kLong)
                                               : source;
    ASSERT_TRUE(codec::EncodeTensor(input, dtype, &wire).ok());
    EXPECT_EQ(wire.dtype(), dtype);
    EXPECT_EQ(codec::ShapeOf(wire), (std::vector<int64_t>{2, 3, 4}));
    EXPECT_EQ(wire.data().size(), 24 * codec::ElementSize(dtype));
    auto back = codec::DecodeTensor(wire, "t");
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    if (dtype == v1::BOOL || integral) {
      EXPECT_TRUE(at::equal(back->to(input.scalar_type()), input));
    } else {
      EXPECT_TRUE(at::allclose(back->to(at::kFloat), source, 1e-2, 1e-2));
    }
  }
  v1::Tensor wire;
  EXPECT_EQ(
      codec::EncodeTensor(at::ones({2}, at::kDouble), v1::DATA_TYPE_UNSPECIFIED, &wire).code(),
      StatusCode::kInvalidArgument);
}

TEST(TensorCodec, BorrowedDecodingSharesTheRequestBytes) {
  v1::Tensor wire = WireFloat({4, 64}, 1.5f);
  auto borrowed = codec::DecodeTensor(wire, "query", /*borrow=*/true);
  auto copied = codec::DecodeTensor(wire, "query");
  ASSERT_TRUE(borrowed.ok() && copied.ok());
  EXPECT_TRUE(at::equal(*borrowed, *copied));
  EXPECT_EQ(borrowed->data_ptr(), static_cast<const void*>(wire.data().data()));
  EXPECT_NE(copied->data_ptr(), static_cast<const void*>(wire.data().data()));
}

}  // namespace
}  // namespace mha::testing
