// mha.v1's shared-memory tensors (server/frontends/grpc_v1/tensor_shm.h) through the decoders and
// encoders the front end uses (ForwardRequest, LayerStepRequest): inputs borrowed from the region,
// outputs written into it with their place in the answer, and the refusals with the Open
// Inference Protocol's words under mha.v1's field names.
#include "server/frontends/grpc_v1/tensor_shm.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "server/frontends/grpc_v1/forward_request.h"
#include "server/frontends/grpc_v1/layer_step_wire.h"
#include "shm_test_object.h"

namespace mha::serve {
namespace tensor_shm_test {

using ::testing::HasSubstr;
using testing::ShmTestObject;

constexpr uint64_t kQueryBytes = 2 * 3 * 4 * sizeof(float);  // query [2, 3, 4] FLOAT32

void Place(v1::SharedMemoryRef* ref, const std::string& region, uint64_t bytes, uint64_t offset) {
  ref->set_shared_memory_region(region);
  ref->set_shared_memory_byte_size(bytes);
  ref->set_shared_memory_offset(offset);
}

class TensorShm : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(object_.ok());
    ASSERT_TRUE(registry_.Register({"in", object_.key(), 0, 1024}).ok());
    ASSERT_TRUE(registry_.Register({"out", object_.key(), 1024, 1024}).ok());
    for (size_t i = 0; i < kQueryBytes / sizeof(float); ++i) {
      const auto v = static_cast<float>(i);
      std::memcpy(object_.data() + 64 + i * sizeof(float), &v, sizeof(float));
    }
  }

  // query [2, 3, 4] FLOAT32 in region "in" at offset 64; output into "out" at 0.
  static v1::ForwardRequest Request() {
    v1::ForwardRequest r;
    r.mutable_query()->set_dtype(v1::FLOAT32);
    for (int64_t d : {2, 3, 4}) r.mutable_query()->add_shape(d);
    Place(r.mutable_query()->mutable_shared_memory(), "in", kQueryBytes, 64);
    Place(r.mutable_output_shared_memory(), "out", kQueryBytes, 0);
    return r;
  }

  Status Refusal(const v1::ForwardRequest& r) {
    ShmPlan plan;
    return DecodeForwardRequest(r, 1 << 20, true, &registry_, &plan).status();
  }

  ShmTestObject object_{2048};
  SharedMemoryRegistry registry_{ShmRegistryOptions{true, 1 << 20}};
};

TEST_F(TensorShm, AQueryIsBorrowedFromTheRegion) {
  ShmPlan plan;
  auto request = DecodeForwardRequest(Request(), 1 << 20, true, &registry_, &plan);
  ASSERT_TRUE(request.ok()) << request.status().message();
  const HostTensor& q = request->inputs.query;
  const float changed = 42.0f;  // the client's later write shows through: no copy
  std::memcpy(object_.data() + 64, &changed, sizeof(float));
  float seen = 0;
  std::memcpy(&seen, q.data(), sizeof(float));
  EXPECT_EQ(seen, changed);
  EXPECT_EQ(q.shape(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(plan.inputs.size(), 1u);
  ASSERT_EQ(plan.outputs.size(), 2u);  // output, attn_weights
  EXPECT_TRUE(plan.outputs[0].has_value());
  EXPECT_FALSE(plan.outputs[1].has_value());
}

TEST_F(TensorShm, TheOutputIsWrittenIntoTheRegionAndNamedInTheAnswer) {
  ShmPlan plan;
  ASSERT_TRUE(DecodeForwardRequest(Request(), 1 << 20, true, &registry_, &plan).ok());
  InferenceResponse result;
  result.outputs.output = HostTensor::FromFloats({2, 3, 4}, std::vector<float>(24, 2.5f));
  v1::ForwardResponse out;
  HostTensor in_band;
  ASSERT_TRUE(EncodeForwardResponse(result, false, &out, &in_band, &plan).ok());
  EXPECT_FALSE(in_band.defined());  // nothing left to send in the message
  EXPECT_TRUE(out.output().data().empty());
  EXPECT_EQ(out.output().dtype(), v1::FLOAT32);
  EXPECT_EQ(out.output().shape_size(), 3);
  EXPECT_EQ(out.output().shared_memory().shared_memory_region(), "out");
  EXPECT_EQ(out.output().shared_memory().shared_memory_byte_size(), kQueryBytes);
  float written = 0;
  std::memcpy(&written, object_.data() + 1024 + 23 * sizeof(float), sizeof(float));
  EXPECT_EQ(written, 2.5f);
}

TEST_F(TensorShm, AnOutputPlaceTooSmallIsRefusedWhenWritten) {
  v1::ForwardRequest r = Request();
  r.mutable_output_shared_memory()->set_shared_memory_byte_size(16);
  ShmPlan plan;
  ASSERT_TRUE(DecodeForwardRequest(r, 1 << 20, true, &registry_, &plan).ok());
  InferenceResponse result;
  result.outputs.output = HostTensor::FromFloats({2, 3, 4}, std::vector<float>(24, 1.0f));
  v1::ForwardResponse out;
  const Status s = EncodeForwardResponse(result, false, &out, nullptr, &plan);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("output: shared_memory_byte_size 16 (region 'out') is too "
                                     "small for the output's 96 bytes (shape [2, 3, 4]"));
}

TEST_F(TensorShm, RefusalsUseTheOpenInferenceProtocolsWords) {
  v1::ForwardRequest r = Request();
  r.mutable_query()->mutable_shared_memory()->clear_shared_memory_byte_size();
  EXPECT_THAT(Refusal(r).message(),
              HasSubstr("query: shared_memory.shared_memory_region 'in' without "
                        "shared_memory_byte_size (give the tensor's byte size)"));
  r = Request();
  r.mutable_query()->mutable_shared_memory()->clear_shared_memory_region();
  EXPECT_THAT(Refusal(r).message(),
              HasSubstr("query: shared_memory.shared_memory_byte_size without "
                        "shared_memory_region (name the region too)"));
  r = Request();
  r.mutable_query()->set_data(std::string(kQueryBytes, '\0'));
  EXPECT_THAT(Refusal(r).message(),
              HasSubstr("query: data must not be set when the tensor is in shared memory "
                        "region 'in'"));
  r = Request();
  r.mutable_query()->mutable_shared_memory()->set_shared_memory_byte_size(kQueryBytes + 4);
  EXPECT_THAT(Refusal(r).message(),
              HasSubstr("query: shared_memory_byte_size 100 (region 'in') is not the tensor's "
                        "24 x 4 bytes (shape [2, 3, 4]"));
  r = Request();
  r.mutable_output_shared_memory()->set_shared_memory_region("nope");
  const Status unknown = Refusal(r);
  EXPECT_EQ(unknown.code(), StatusCode::kNotFound);
  EXPECT_THAT(unknown.message(), HasSubstr("output: shared memory region 'nope' is not registered "
                                           "(registered: 'in', 'out')"));
  r = Request();
  Place(r.mutable_attn_weights_shared_memory(), "out", 64, 512);
  EXPECT_THAT(Refusal(r).message(), HasSubstr("attn_weights_shared_memory: needs need_weights"));
  // Without a registry (a caller that passes none) a region is refused, not read.
  EXPECT_THAT(DecodeForwardRequest(Request(), 1 << 20, true).status().message(),
              HasSubstr("query: shared memory is not available on this endpoint"));
}

TEST_F(TensorShm, ALayerStepEntryReadsAndWritesItsRegions) {
  v1::LayerStepRequest r;
  v1::LayerStepEntry* e = r.add_entries();
  e->set_session_id("s1");
  e->mutable_hidden()->set_dtype(v1::FLOAT32);
  e->mutable_hidden()->add_shape(6);
  e->mutable_hidden()->add_shape(4);
  Place(e->mutable_hidden()->mutable_shared_memory(), "in", kQueryBytes, 64);
  Place(e->mutable_output_shared_memory(), "out", kQueryBytes, 128);
  ShmPlan plan;
  auto decoded = DecodeLayerStepRequest(r, 1 << 20, true, &registry_, &plan);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  float first = -1;
  std::memcpy(&first, decoded->entries[0].hidden.data() + 4, sizeof(float));
  EXPECT_EQ(first, 1.0f);  // element 1 of the region's values
  LayerStepResponse result;
  result.outputs.push_back(HostTensor::FromFloats({6, 4}, std::vector<float>(24, 7.0f)));
  v1::LayerStepResponse out;
  ASSERT_TRUE(EncodeLayerStepResponse(r, result, &out, &plan).ok());
  ASSERT_EQ(out.outputs_size(), 1);
  EXPECT_TRUE(out.outputs(0).data().empty());
  EXPECT_EQ(out.outputs(0).shared_memory().shared_memory_offset(), 128u);
  float written = 0;
  std::memcpy(&written, object_.data() + 1024 + 128, sizeof(float));
  EXPECT_EQ(written, 7.0f);
  e->mutable_hidden()->mutable_shared_memory()->set_shared_memory_byte_size(8);
  ShmPlan refused;
  EXPECT_THAT(DecodeLayerStepRequest(r, 1 << 20, true, &registry_, &refused).status().message(),
              HasSubstr("entries[0].hidden: shared_memory_byte_size 8 (region 'in') is not the "
                        "tensor's 24 x 4 bytes"));
}

}  // namespace tensor_shm_test
}  // namespace mha::serve
