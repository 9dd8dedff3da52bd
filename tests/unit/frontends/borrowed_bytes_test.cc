// The unary Forward's answer with its output bytes borrowed (borrowed_bytes.h): it parses to the
// very message the copying encoder builds, and its data slice is the tensor's own memory.
#include "server/frontends/common/borrowed_bytes.h"

#include <ATen/ATen.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mha/tensor_adapter.h"
#include "server/frontends/grpc_v1/forward_request.h"

namespace mha::serve {
namespace borrowed_bytes_test {

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes;
}

// As the core answers: the output cast to `dtype`, on the host (mha/tensor_adapter.h).
InferenceResponse Answer(const at::Tensor& output, DType dtype = DType::kFloat32) {
  InferenceResponse r;
  r.outputs.output = ToHost(output, ToElementType(dtype));
  r.model = "m";
  r.model_version = "3";
  r.output_dtype = dtype;
  r.queue_us = 12;
  r.compute_us = 345;
  return r;
}

void ExpectSameAsCopying(const InferenceResponse& r, bool need_weights) {
  v1::ForwardResponse copied;
  ASSERT_TRUE(EncodeForwardResponse(r, need_weights, &copied).ok());
  grpc::ByteBuffer buffer;
  ASSERT_TRUE(WriteForwardResponse(r, need_weights, &buffer).ok());
  v1::ForwardResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(buffer)));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(parsed, copied))
      << parsed.ShortDebugString().substr(0, 300) << "\nvs\n"
      << copied.ShortDebugString().substr(0, 300);
  EXPECT_EQ(parsed.output().data().size(), copied.output().data().size());
}

TEST(BorrowedBytesTest, ParsesToTheCopyingEncodersMessage) {
  ExpectSameAsCopying(Answer(at::randn({1, 2, 3})), false);     // 24 bytes: 1-byte lengths
  ExpectSameAsCopying(Answer(at::randn({2, 16, 512})), false);  // 64 KiB: 3-byte lengths
  ExpectSameAsCopying(Answer(at::randn({4, 8, 6}).transpose(0, 1)), false);   // not contiguous
  ExpectSameAsCopying(Answer(at::randn({2, 5, 8}), DType::kFloat16), false);  // converted
  InferenceResponse weights = Answer(at::randn({2, 4, 8}));
  weights.outputs.attn_weights = ToHost(at::rand({2, 4, 4}));
  weights.session_tokens = 9;
  ExpectSameAsCopying(weights, true);
}

TEST(BorrowedBytesTest, TheDataSliceIsTheTensorsMemory) {
  const at::Tensor output = at::randn({2, 16, 64});
  grpc::ByteBuffer buffer;
  ASSERT_TRUE(WriteForwardResponse(Answer(output), false, &buffer).ok());
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(buffer.Dump(&slices).ok());
  bool shared = false;
  for (const grpc::Slice& s : slices) {
    shared |= s.begin() == static_cast<const uint8_t*>(output.data_ptr());
  }
  EXPECT_TRUE(shared) << "no slice points into the output tensor: it was copied";
}

TEST(BorrowedBytesTest, NestedAndTopLevelFieldsAndEmptyBytes) {
  v1::Tensor head;
  head.set_dtype(v1::FLOAT32);
  head.add_shape(0);
  grpc::ByteBuffer buffer;
  ASSERT_TRUE(
      SerializeWithBorrowedBytes(head, {BorrowedField{{3}, ToHost(at::empty({0}))}}, &buffer).ok());
  v1::Tensor parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(buffer)));
  EXPECT_EQ(parsed.shape_size(), 1);
  EXPECT_TRUE(parsed.data().empty());
  const at::Tensor big = at::arange(5000, at::kFloat);  // 20000 bytes
  ASSERT_TRUE(SerializeWithBorrowedBytes(head, {BorrowedField{{3}, ToHost(big)}}, &buffer).ok());
  ASSERT_TRUE(parsed.ParseFromString(Flatten(buffer)));
  ASSERT_EQ(parsed.data().size(), 20000u);
  EXPECT_EQ(0, std::memcmp(parsed.data().data(), big.data_ptr(), 20000));
}

}  // namespace borrowed_bytes_test
}  // namespace mha::serve
