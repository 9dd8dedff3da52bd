// The REST infer request body parser (infer_body.h): JSON data flattened or nested, FP16/BF16/
// BOOL conversion, binary framing, REST-only parameters taken out, hostile bodies refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "server/frontends/rest/infer_body.h"

namespace mha::serve::rest {
namespace rest_infer_body_test {

StatusOr<InferBody> Parse(const std::string& body,
                          std::optional<std::string> header = std::nullopt) {
  return ParseInferBody(body, header, InferBodyLimits{});
}

TEST(RestInferBody, FlatAndNestedDataAreTheSameBytes) {
  auto flat = Parse(R"({"inputs":[{"name":"query","datatype":"FP32","shape":[1,2,2],
                        "data":[1,2.5,-3,4]}]})");
  auto nested = Parse(R"({"inputs":[{"name":"query","datatype":"FP32","shape":[1,2,2],
                          "data":[[[1,2.5],[-3,4]]]}]})");
  ASSERT_TRUE(flat.ok()) << flat.status().ToString();
  ASSERT_TRUE(nested.ok()) << nested.status().ToString();
  const float expected[] = {1, 2.5f, -3, 4};
  ASSERT_EQ(flat->request.raw_input_contents(0).size(), sizeof(expected));
  EXPECT_EQ(std::memcmp(flat->request.raw_input_contents(0).data(), expected, sizeof(expected)), 0);
  EXPECT_EQ(flat->request.raw_input_contents(0), nested->request.raw_input_contents(0));
  EXPECT_EQ(flat->request.inputs(0).shape_size(), 3);
}

TEST(RestInferBody, HalfBFloatAndBoolConversions) {
  auto r = Parse(R"({"inputs":[
      {"name":"query","datatype":"FP16","shape":[2],"data":[1.5,-2]},
      {"name":"key","datatype":"BF16","shape":[1],"data":[3]},
      {"name":"attn_mask","datatype":"BOOL","shape":[3],"data":[true,false,true]}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::string& half = r->request.raw_input_contents(0);
  ASSERT_EQ(half.size(), 4u);
  EXPECT_EQ(static_cast<uint8_t>(half[1]), 0x3e);  // 1.5 = 0x3e00
  EXPECT_EQ(static_cast<uint8_t>(half[3]), 0xc0);  // -2 = 0xc000
  const std::string& bf = r->request.raw_input_contents(1);
  ASSERT_EQ(bf.size(), 2u);
  EXPECT_EQ(static_cast<uint8_t>(bf[1]), 0x40);  // 3 = 0x4040
  EXPECT_EQ(r->request.raw_input_contents(2), std::string("\1\0\1", 3));
  EXPECT_FALSE(Parse(R"({"inputs":[{"name":"m","datatype":"BOOL","shape":[1],"data":[1]}]})").ok());
  EXPECT_FALSE(
      Parse(R"({"inputs":[{"name":"q","datatype":"FP32","shape":[1],"data":[true]}]})").ok());
}

// tritonclient.http sends a float mask's -inf as -Infinity (Python's json.dumps): accepted in
// data, each datatype getting the IEEE value; BOOL data still needs true/false, and the tokens
// anywhere else are still invalid JSON.
TEST(RestInferBody, NonFiniteDataAsPythonWritesIt) {
  auto r = Parse(R"({"inputs":[
      {"name":"attn_mask","datatype":"FP32","shape":[2,2],"data":[0.0,-Infinity,NaN,Infinity]},
      {"name":"key_padding_mask","datatype":"FP16","shape":[2],"data":[-Infinity,NaN]},
      {"name":"value","datatype":"BF16","shape":[1],"data":[Infinity]}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  float mask[4];
  ASSERT_EQ(r->request.raw_input_contents(0).size(), sizeof(mask));
  std::memcpy(mask, r->request.raw_input_contents(0).data(), sizeof(mask));
  EXPECT_EQ(mask[0], 0.0f);
  EXPECT_EQ(mask[1], -INFINITY);
  EXPECT_TRUE(std::isnan(mask[2]));
  EXPECT_EQ(mask[3], INFINITY);
  uint16_t half[2];
  ASSERT_EQ(r->request.raw_input_contents(1).size(), sizeof(half));
  std::memcpy(half, r->request.raw_input_contents(1).data(), sizeof(half));
  EXPECT_EQ(half[0], 0xfc00);                                            // -inf
  EXPECT_TRUE((half[1] & 0x7c00) == 0x7c00 && (half[1] & 0x03ff) != 0);  // a NaN
  uint16_t bf = 0;
  ASSERT_EQ(r->request.raw_input_contents(2).size(), sizeof(bf));
  std::memcpy(&bf, r->request.raw_input_contents(2).data(), sizeof(bf));
  EXPECT_EQ(bf, 0x7f80);  // +inf
  auto bool_nan = Parse(R"({"inputs":[{"name":"m","datatype":"BOOL","shape":[1],"data":[NaN]}]})");
  ASSERT_FALSE(bool_nan.ok());
  EXPECT_EQ(bool_nan.status().message(), "m: datatype BOOL needs data of true/false values");
  auto parameter = Parse(R"({"inputs":[{"name":"q","datatype":"FP32","shape":[1],"data":[NaN]}],
                             "parameters":{"need_weights":NaN}})");
  ASSERT_FALSE(parameter.ok());
  EXPECT_NE(parameter.status().message().find("request body is not valid JSON"), std::string::npos)
      << parameter.status().message();
}

TEST(RestInferBody, BinaryFramingAndRestOnlyParametersAreTakenOut) {
  const std::string json = R"({"id":"7","parameters":{"binary_data_output":true,"is_causal":true},
      "inputs":[{"name":"query","datatype":"FP32","shape":[1],"parameters":{"binary_data_size":4}}],
      "outputs":[{"name":"output","parameters":{"binary_data":false}}]})";
  const float one = 1.0f;
  const std::string bytes(reinterpret_cast<const char*>(&one), 4);
  auto r = Parse(json + bytes, std::to_string(json.size()));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->request.id(), "7");
  EXPECT_EQ(r->request.raw_input_contents(0), bytes);
  EXPECT_EQ(r->request.parameters().count("binary_data_output"), 0u);
  EXPECT_TRUE(r->request.parameters().at("is_causal").bool_param());
  EXPECT_EQ(r->request.inputs(0).parameters().count("binary_data_size"), 0u);
  EXPECT_EQ(r->request.outputs(0).parameters().count("binary_data"), 0u);
  EXPECT_FALSE(r->Binary("output"));       // per output wins
  EXPECT_TRUE(r->Binary("attn_weights"));  // the request's default
  EXPECT_FALSE(Parse(json + bytes + "x", std::to_string(json.size())).ok());
  EXPECT_FALSE(Parse(json + bytes, "12x").ok());
}

TEST(RestInferBody, HostileBodiesAreRefusedNotParsed) {
  EXPECT_FALSE(Parse(std::string(100000, '[')).ok());  // depth, before parsing
  std::string wide = R"({"inputs":[],"id":[)";
  for (int i = 0; i < 100000; ++i) wide += "[],";
  EXPECT_FALSE(Parse(wide + "1]}").ok());  // values outside data are bounded
  std::string data = R"({"inputs":[{"name":"query","datatype":"FP32","shape":[100000],"data":[)";
  for (int i = 0; i < 100000; ++i) data += i == 0 ? "[0]" : ",[0]";
  auto ok = Parse(data + "]}]}");  // nested one-element arrays inside data are no tree
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->request.raw_input_contents(0).size(), 400000u);
}

}  // namespace rest_infer_body_test
}  // namespace mha::serve::rest
