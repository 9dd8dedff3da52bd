// The tensor adapter (mha/tensor_adapter.h): host tensors into ATen without a copy where the
// bytes allow it, answers cast once to the asked element type and copied to the host.
#include "mha/tensor_adapter.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>

namespace mha {
namespace tensor_adapter_test {

TEST(TensorAdapter, AlignedBytesAreWrappedNotCopiedAndTheOwnerLives) {
  auto bytes = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
  std::weak_ptr<std::vector<float>> watch = bytes;
  auto host = HostTensor::View(ElementType::kFloat32, {2, 3}, bytes->data(), 24, bytes);
  ASSERT_TRUE(host.ok());
  bytes.reset();
  at::Tensor t = ToTensor(*host);
  host = Status(StatusCode::kInternal, "drop");
  EXPECT_FALSE(watch.expired()) << "the ATen tensor keeps the owner";
  EXPECT_EQ(t.sizes(), at::IntArrayRef({2, 3}));
  EXPECT_EQ(t[1][2].item<float>(), 6.0f);
  t = at::Tensor();
  EXPECT_TRUE(watch.expired());
}

TEST(TensorAdapter, MisalignedBytesAreCopied) {
  std::string raw(1 + 8, '\0');
  const float values[2] = {3.5f, -1.0f};
  std::memcpy(&raw[1], values, sizeof values);
  auto host = HostTensor::View(ElementType::kFloat32, {2}, raw.data() + 1, 8, nullptr);
  ASSERT_TRUE(host.ok());
  at::Tensor t = ToTensor(*host);
  EXPECT_NE(t.data_ptr(), static_cast<const void*>(raw.data() + 1));
  EXPECT_TRUE(at::equal(t, at::tensor({3.5f, -1.0f})));
}

TEST(TensorAdapter, AnswersAreCastOnceAndOwned) {
  at::Tensor out = at::randn({2, 3, 4});
  HostTensor half = ToHost(out, ElementType::kFloat16);
  EXPECT_EQ(half.dtype(), ElementType::kFloat16);
  EXPECT_EQ(half.bytes(), 2u * 3 * 4 * 2);
  EXPECT_TRUE(at::equal(ToTensor(half), out.to(at::kHalf)));
  HostTensor same = ToHost(out, ElementType::kFloat32);  // already so: no copy
  EXPECT_EQ(static_cast<const void*>(same.data()), out.data_ptr());
  HostTensor strided = ToHost(out.transpose(0, 2), ElementType::kFloat32);
  EXPECT_TRUE(at::equal(ToTensor(strided), out.transpose(0, 2).contiguous()));
}

TEST(TensorAdapter, OutputsTakeTheirTypes) {
  ForwardOutputs out;
  out.output = at::randn({1, 2, 4});
  out.attn_weights = at::rand({1, 2, 2});
  out.topk_indices = at::zeros({1, 2, 1}, at::kInt);
  HostOutputs host = ToHostOutputs(out, OutputTypes{ElementType::kBFloat16, std::nullopt});
  EXPECT_EQ(host.output.dtype(), ElementType::kBFloat16);
  EXPECT_EQ(host.attn_weights.dtype(), ElementType::kBFloat16) << "weights follow the output";
  EXPECT_EQ(host.topk_indices.dtype(), ElementType::kInt32) << "indices stay as computed";
  EXPECT_FALSE(host.head_entropy.defined());
  host = ToHostOutputs(out, OutputTypes{ElementType::kFloat16, ElementType::kFloat32});
  EXPECT_EQ(host.output.dtype(), ElementType::kFloat16);
  EXPECT_EQ(host.attn_weights.dtype(), ElementType::kFloat32);
}

TEST(TensorAdapter, TypesTheWireLacksAreNamed) {
  auto type = ToElementType(at::kDouble);
  ASSERT_FALSE(type.ok());
  EXPECT_EQ(type.status().message(),
            "tensor dtype Double cannot be sent (float32, float16, bfloat16, bool, int32 or "
            "int64)");
  EXPECT_EQ(ToScalarType(ElementType::kInt64), at::kLong);
}

}  // namespace tensor_adapter_test
}  // namespace mha
