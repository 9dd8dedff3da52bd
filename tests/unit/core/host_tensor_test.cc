// HostTensor (mha/host_tensor.h): views and copies of host bytes, their checks and owners.
#include "mha/host_tensor.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>

namespace mha {
namespace host_tensor_test {

TEST(HostTensor, ViewPointsAtTheBytesAndKeepsTheOwner) {
  auto bytes = std::make_shared<std::string>(24, '\0');
  std::weak_ptr<std::string> watch = bytes;
  auto view = HostTensor::View(ElementType::kFloat32, {2, 3}, bytes->data(), bytes->size(), bytes);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_TRUE(view->defined());
  EXPECT_EQ(view->data(), bytes->data());
  EXPECT_EQ(view->numel(), 6);
  EXPECT_EQ(view->size(0), 2);
  EXPECT_EQ(view->size(-1), 3);
  EXPECT_EQ(view->size(2), 0);
  bytes.reset();
  EXPECT_FALSE(watch.expired()) << "the view's owner keeps the bytes";
  view = Status(StatusCode::kInternal, "drop");
  EXPECT_TRUE(watch.expired());
}

TEST(HostTensor, ByteCountMustMatchTheShape) {
  const char data[10] = {};
  auto wrong = HostTensor::View(ElementType::kFloat16, {2, 3}, data, 10, nullptr, "query");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(wrong.status().message(), "query: data has 10 bytes, shape [2, 3] float16 needs 12");
  auto negative = HostTensor::View(ElementType::kBool, {-1}, data, 0, nullptr, "mask");
  EXPECT_EQ(negative.status().message(), "mask: negative dimension in shape [-1]");
  auto huge = HostTensor::View(ElementType::kInt64, {int64_t{1} << 40, int64_t{1} << 40}, data, 0,
                               nullptr, "x");
  EXPECT_EQ(huge.status().message(), "x: shape [1099511627776, 1099511627776] is too large");
}

TEST(HostTensor, CopyOwnsItsBytes) {
  std::string source(8, 'a');
  auto copy = HostTensor::Copy(ElementType::kInt32, {2}, source.data(), source.size());
  ASSERT_TRUE(copy.ok());
  source.assign(8, 'b');
  EXPECT_NE(copy->data(), source.data());
  EXPECT_EQ(std::string(copy->data(), copy->bytes()), std::string(8, 'a'));
  EXPECT_NE(copy->owner(), nullptr);
}

TEST(HostTensor, FromFloatsAndTheUndefinedTensor) {
  HostTensor t = HostTensor::FromFloats({1, 2}, {1.5f, -2.0f});
  ASSERT_TRUE(t.defined());
  float values[2];
  std::memcpy(values, t.data(), sizeof values);
  EXPECT_EQ(values[0], 1.5f);
  EXPECT_EQ(values[1], -2.0f);
  HostTensor none;
  EXPECT_FALSE(none.defined());
  EXPECT_EQ(none.numel(), 0);
  EXPECT_EQ(none.dim(), 0);
}

TEST(ElementTypes, NamesSizesAndTheFloatingOnes) {
  EXPECT_STREQ(ElementTypeName(ElementType::kBFloat16), "bfloat16");
  EXPECT_EQ(ElementSize(ElementType::kInt64), 8u);
  EXPECT_EQ(ElementSize(ElementType::kBool), 1u);
  EXPECT_TRUE(IsFloating(ElementType::kFloat16));
  EXPECT_FALSE(IsFloating(ElementType::kInt32));
  EXPECT_EQ(ToElementType(DType::kBFloat16), ElementType::kBFloat16);
  EXPECT_EQ(ToDType(ElementType::kFloat32), DType::kFloat32);
  EXPECT_FALSE(ToDType(ElementType::kBool).has_value());
}

}  // namespace host_tensor_test
}  // namespace mha
