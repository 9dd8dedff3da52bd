// tensor_codec on its own (torch-free): header checks (overflow-safe), BOOL bytes, round trips of
// host tensors for every wire dtype, borrowed decoding.
#include "proto/wire/tensor_codec.h"

#include <gtest/gtest.h>

#include "wire_tensors.h"

namespace mha::testing {
namespace tensor_codec_test {

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
  for (auto dtype : {v1::FLOAT32, v1::FLOAT16, v1::BFLOAT16, v1::BOOL, v1::INT32, v1::INT64}) {
    const size_t size = codec::ElementSize(dtype);
    std::string bytes(24 * size, '\0');
    for (size_t i = 0; i < bytes.size(); ++i) {  // BOOL bytes must be 0 or 1
      bytes[i] = static_cast<char>(dtype == v1::BOOL ? i % 2 : (i * 37) % 251);
    }
    auto element = codec::ToElementType(dtype);
    ASSERT_TRUE(element.ok());
    auto host = HostTensor::Copy(*element, {2, 3, 4}, bytes.data(), bytes.size());
    ASSERT_TRUE(host.ok());
    v1::Tensor wire;
    ASSERT_TRUE(codec::EncodeTensor(*host, &wire).ok());
    EXPECT_EQ(wire.dtype(), dtype);
    EXPECT_EQ(codec::ShapeOf(wire), (std::vector<int64_t>{2, 3, 4}));
    EXPECT_EQ(wire.data(), bytes) << "written as it is: the core cast it already";
    auto back = codec::DecodeTensor(wire, "t");
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->dtype(), *element);
    EXPECT_EQ(back->shape(), (std::vector<int64_t>{2, 3, 4}));
    EXPECT_EQ(std::string(back->data(), back->bytes()), bytes);
    EXPECT_EQ(codec::ToProtoDType(*element), dtype);
  }
  v1::Tensor wire;
  EXPECT_EQ(codec::EncodeTensor(HostTensor(), &wire).code(), StatusCode::kInternal);
  EXPECT_EQ(codec::ToElementType(v1::DATA_TYPE_UNSPECIFIED).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(TensorCodec, BorrowedDecodingSharesTheRequestBytes) {
  v1::Tensor wire = WireFloat({4, 64}, 1.5f);
  auto borrowed = codec::DecodeTensor(wire, "query", /*borrow=*/true);
  auto copied = codec::DecodeTensor(wire, "query");
  ASSERT_TRUE(borrowed.ok() && copied.ok());
  EXPECT_EQ(std::string(borrowed->data(), borrowed->bytes()),
            std::string(copied->data(), copied->bytes()));
  EXPECT_EQ(borrowed->data(), wire.data().data());
  EXPECT_EQ(borrowed->owner(), nullptr) << "the caller keeps the message alive";
  EXPECT_NE(copied->data(), wire.data().data());
  EXPECT_NE(copied->owner(), nullptr);
}

}  // namespace tensor_codec_test
}  // namespace mha::testing
