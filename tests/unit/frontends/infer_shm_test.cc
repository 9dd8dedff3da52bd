// Shared-memory tensors of ModelInfer (server/frontends/oip/infer_shm.h) through the decoder and
// encoder the front ends use: inputs borrowed from the region, outputs written into it, and
// every refusal with the numbers it names.
#include "server/frontends/oip/infer_shm.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "server/frontends/oip/infer_request.h"
#include "shm_test_object.h"

namespace mha::serve::oip {
namespace infer_shm_test {

using ::testing::HasSubstr;
using testing::ShmTestObject;

constexpr size_t kQueryBytes = 2 * 3 * 4 * sizeof(float);  // query [2, 3, 4] FP32

class InferShm : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(object_.ok());
    ASSERT_TRUE(registry_.Register({"in", object_.key(), 0, 1024}).ok());
    ASSERT_TRUE(registry_.Register({"out", object_.key(), 1024, 1024}).ok());
    options_.shm = &registry_;
    for (size_t i = 0; i < kQueryBytes / sizeof(float); ++i) {
      const auto v = static_cast<float>(i);
      std::memcpy(object_.data() + 64 + i * sizeof(float), &v, sizeof(float));
    }
  }

  // query [2, 3, 4] FP32 in region "in" at offset 64.
  inference::ModelInferRequest Request(int64_t byte_size = kQueryBytes) {
    inference::ModelInferRequest r;
    auto* q = r.add_inputs();
    q->set_name("query");
    q->set_datatype("FP32");
    for (int64_t d : {2, 3, 4}) q->add_shape(d);
    (*q->mutable_parameters())[kShmRegion].set_string_param("in");
    (*q->mutable_parameters())[kShmByteSize].set_int64_param(byte_size);
    (*q->mutable_parameters())[kShmOffset].set_int64_param(64);
    return r;
  }

  Status Refusal(const inference::ModelInferRequest& r) {
    return DecodeModelInferRequest(r, options_).status();
  }

  ShmTestObject object_{2048};
  SharedMemoryRegistry registry_{ShmRegistryOptions{true, 1 << 20}};
  DecodeOptions options_;
};

TEST_F(InferShm, AnInputIsBorrowedFromTheRegion) {
  auto call = DecodeModelInferRequest(Request(), options_);
  ASSERT_TRUE(call.ok()) << call.status().message();
  const HostTensor& q = call->request.inputs.query;
  // No copy: the tensor is the server's own mapping of the object; the client's later write
  // shows through it.
  const float changed = 42.0f;
  std::memcpy(object_.data() + 64, &changed, sizeof(float));
  float seen = 0;
  std::memcpy(&seen, q.data(), sizeof(float));
  EXPECT_EQ(seen, changed);
  EXPECT_EQ(q.shape(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_NE(q.owner(), nullptr);  // the tensor keeps the mapping
  ASSERT_EQ(call->shm.inputs.size(), 1u);
}

TEST_F(InferShm, InBandAndSharedInputsMix) {
  inference::ModelInferRequest r = Request();
  for (const char* name : {"key", "value"}) {
    auto* t = r.add_inputs();
    t->set_name(name);
    t->set_datatype("FP32");
    for (int64_t d : {2, 5, 4}) t->add_shape(d);
    r.add_raw_input_contents()->assign(2 * 5 * 4 * sizeof(float), '\0');
  }
  auto call = DecodeModelInferRequest(r, options_);
  ASSERT_TRUE(call.ok()) << call.status().message();
  EXPECT_EQ(call->request.inputs.key.shape()[1], 5);
  r.add_raw_input_contents();  // one entry too many: 3 for 2 inputs not in shared memory
  EXPECT_THAT(Refusal(r).message(), HasSubstr("raw_input_contents has 3 entries for 2 inputs not "
                                              "in shared memory"));
}

TEST_F(InferShm, RefusesWhatDoesNotAddUp) {
  Status s = Refusal(Request(kQueryBytes - 4));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("query: shared_memory_byte_size 92 (region 'in') is not the "
                                     "tensor's 24 x 4 bytes (shape [2, 3, 4] FP32)"));
  inference::ModelInferRequest r = Request();
  (*r.mutable_inputs(0)->mutable_parameters())[kShmOffset].set_int64_param(1000);
  EXPECT_THAT(Refusal(r).message(), HasSubstr("1000 + 96 = 1096 is past the end of region 'in' "
                                              "(1024 bytes)"));
  r = Request();
  (*r.mutable_inputs(0)->mutable_parameters())[kShmRegion].set_string_param("nope");
  EXPECT_EQ(Refusal(r).code(), StatusCode::kNotFound);
  r = Request();
  r.mutable_inputs(0)->mutable_parameters()->erase(kShmByteSize);
  EXPECT_THAT(Refusal(r).message(), HasSubstr("query: parameters.shared_memory_region 'in' "
                                              "without shared_memory_byte_size"));
  r = Request();
  r.mutable_inputs(0)->mutable_parameters()->erase(kShmRegion);
  EXPECT_THAT(Refusal(r).message(),
              HasSubstr("query: parameters.shared_memory_byte_size without shared_memory_region"));
  r = Request();
  r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.0f);
  EXPECT_THAT(Refusal(r).message(), HasSubstr("query: contents must not be set when the tensor is "
                                              "in shared memory region 'in'"));
  r = Request();
  (*r.mutable_inputs(0)->mutable_parameters())[kShmByteSize].set_int64_param(-1);
  EXPECT_THAT(Refusal(r).message(), HasSubstr("must be a non-negative int64_param"));
  options_.shm = nullptr;
  EXPECT_THAT(Refusal(Request()).message(), HasSubstr("shared memory is not available"));
}

TEST_F(InferShm, AnOutputIsWrittenIntoItsRegion) {
  inference::ModelInferRequest r = Request();
  auto* out = r.add_outputs();
  out->set_name("output");
  (*out->mutable_parameters())[kShmRegion].set_string_param("out");
  (*out->mutable_parameters())[kShmByteSize].set_int64_param(kQueryBytes);
  (*out->mutable_parameters())[kShmOffset].set_int64_param(8);
  auto call = DecodeModelInferRequest(r, options_);
  ASSERT_TRUE(call.ok()) << call.status().message();
  ASSERT_EQ(call->shm.outputs.size(), 1u);
  InferenceResponse answer;
  answer.outputs.output = HostTensor::FromFloats({2, 3, 4}, std::vector<float>(24, 2.5f));
  inference::ModelInferResponse response;
  ASSERT_TRUE(EncodeModelInferResponse(answer, call->outputs, "", &response, &call->shm).ok());
  float first = 0;
  std::memcpy(&first, object_.data() + 1024 + 8, sizeof(float));
  EXPECT_EQ(first, 2.5f);
  ASSERT_EQ(response.outputs_size(), 1);
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  EXPECT_TRUE(response.raw_output_contents(0).empty());
  const auto& params = response.outputs(0).parameters();
  EXPECT_EQ(params.at(kShmRegion).string_param(), "out");
  EXPECT_EQ(params.at(kShmByteSize).int64_param(), static_cast<int64_t>(kQueryBytes));
  EXPECT_EQ(params.at(kShmOffset).int64_param(), 8);
  EXPECT_EQ(response.outputs(0).shape_size(), 3);
}

TEST_F(InferShm, AnOutputRegionTooSmallIsRefused) {
  inference::ModelInferRequest r = Request();
  auto* out = r.add_outputs();
  out->set_name("output");
  (*out->mutable_parameters())[kShmRegion].set_string_param("out");
  (*out->mutable_parameters())[kShmByteSize].set_int64_param(16);
  auto call = DecodeModelInferRequest(r, options_);
  ASSERT_TRUE(call.ok());
  InferenceResponse answer;
  answer.outputs.output = HostTensor::FromFloats({2, 3, 4}, std::vector<float>(24, 1.0f));
  inference::ModelInferResponse response;
  const Status s = EncodeModelInferResponse(answer, call->outputs, "", &response, &call->shm);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("output: shared_memory_byte_size 16 (region 'out') is too "
                                     "small for the output's 96 bytes (shape [2, 3, 4] FP32)"));
}

}  // namespace infer_shm_test
}  // namespace mha::serve::oip
