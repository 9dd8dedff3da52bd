// The REST infer answer (infer_response.h): JSON data in shortest form (NaN and infinities as
// Python writes them), binary outputs after the JSON with its length.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "server/frontends/rest/infer_response.h"

namespace mha::serve::rest {
namespace rest_infer_response_test {

TEST(RestInferResponse, JsonDataAndBinaryOutputs) {
  inference::ModelInferResponse response;
  response.set_model_name("m");
  response.set_model_version("1");
  response.set_id("x");
  (*response.mutable_parameters())["queue_us"].set_int64_param(5);
  for (const char* name : {"output", "attn_weights_topk_indices"}) {
    auto* o = response.add_outputs();
    o->set_name(name);
    o->set_datatype(std::string(name) == "output" ? "FP32" : "INT64");
    o->add_shape(2);
  }
  const float f[] = {0.1f, -2};
  const int64_t i[] = {3, -4};
  response.add_raw_output_contents()->assign(reinterpret_cast<const char*>(f), sizeof(f));
  response.add_raw_output_contents()->assign(reinterpret_cast<const char*>(i), sizeof(i));
  InferBody request;
  request.binary_output["attn_weights_topk_indices"] = true;
  inference::ModelInferResponse copy = response;
  RestResponse out = EncodeInferResponse(&copy, request);
  ASSERT_TRUE(out.header_length.has_value());
  const auto j = nlohmann::json::parse(out.body.substr(0, *out.header_length));
  EXPECT_EQ(j["outputs"][0]["data"], nlohmann::json::parse("[0.1,-2]"));  // shortest form
  EXPECT_EQ(j["outputs"][1]["parameters"]["binary_data_size"], 16);
  EXPECT_EQ(j["parameters"]["queue_us"], 5);
  EXPECT_EQ(out.body.substr(*out.header_length), std::string(reinterpret_cast<const char*>(i), 16));
  request.binary_output.clear();
  out = EncodeInferResponse(&response, request);
  EXPECT_FALSE(out.header_length.has_value());
  EXPECT_EQ(nlohmann::json::parse(out.body)["outputs"][1]["data"], nlohmann::json::parse("[3,-4]"));
}

// NaN and infinities as Python's json.dumps and Triton's TritonJson (kWriteNanAndInfFlag) write
// them: bare NaN, Infinity, -Infinity; FP16 and BF16 as the float they are.
TEST(RestInferResponse, NonFiniteValuesAreWrittenAsPythonDoes) {
  inference::ModelInferResponse response;
  response.set_model_name("m");
  response.set_model_version("1");
  auto* fp32 = response.add_outputs();
  fp32->set_name("output");
  fp32->set_datatype("FP32");
  fp32->add_shape(4);
  const float f[] = {std::nanf(""), INFINITY, -INFINITY, 1.5f};
  response.add_raw_output_contents()->assign(reinterpret_cast<const char*>(f), sizeof(f));
  auto* fp16 = response.add_outputs();
  fp16->set_name("attn_weights");
  fp16->set_datatype("FP16");
  fp16->add_shape(3);
  const uint16_t h[] = {0x7e00, 0xfc00, 0x3c00};  // NaN, -inf, 1
  response.add_raw_output_contents()->assign(reinterpret_cast<const char*>(h), sizeof(h));
  const RestResponse out = EncodeInferResponse(&response, InferBody());
  EXPECT_FALSE(out.header_length.has_value());
  EXPECT_NE(out.body.find(R"("data":[NaN,Infinity,-Infinity,1.5])"), std::string::npos) << out.body;
  EXPECT_NE(out.body.find(R"("data":[NaN,-Infinity,1])"), std::string::npos) << out.body;
  EXPECT_EQ(out.body.find("null"), std::string::npos) << out.body;
}

}  // namespace rest_infer_response_test
}  // namespace mha::serve::rest
