// The REST front end's translation, in-process: the one status converter, the JSON of the OIP
// protos (64-bit integers as numbers), the request body parser (JSON data flattened or nested,
// FP16/BF16/BOOL conversion, binary framing, REST-only parameters taken out), trace context.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "server/frontends/common/trace_context.h"
#include "server/frontends/rest/http_status.h"
#include "server/frontends/rest/infer_body.h"
#include "server/frontends/rest/infer_response.h"
#include "server/frontends/rest/proto_json.h"

namespace mha::serve::rest {
namespace {

TEST(RestHttpStatus, OneConverterForEveryCode) {
  EXPECT_EQ(HttpStatusOf(Status::Ok()), 200);
  EXPECT_EQ(HttpStatusOf(InvalidArgument("x")), 400);
  EXPECT_EQ(HttpStatusOf(FailedPrecondition("x")), 400);
  EXPECT_EQ(HttpStatusOf(NotFound("x")), 404);
  EXPECT_EQ(HttpStatusOf(Unavailable("x")), 503);
  EXPECT_EQ(HttpStatusOf(ResourceExhausted("queue full: 3 requests waiting")), 429);
  EXPECT_EQ(HttpStatusOf(ResourceExhausted("KV cache full: 2 blocks")), 429);
  EXPECT_EQ(HttpStatusOf(ResourceExhausted("request is 9 bytes, over --max-message-bytes 8")), 413);
  EXPECT_EQ(HttpStatusOf(DeadlineExceeded("x")), 504);
  EXPECT_EQ(HttpStatusOf(Unauthenticated("x")), 401);
  EXPECT_EQ(HttpStatusOf(Internal("x")), 500);
  EXPECT_EQ(ErrorBody(NotFound("model 'a\"b' not found")), R"({"error":"model 'a\"b' not found"})");
}

TEST(RestProtoJson, Int64AsNumbersEnumsByNameMapsAsObjects) {
  inference::ModelMetadataResponse m;
  m.set_name("enc");
  auto* input = m.add_inputs();
  input->set_name("query");
  input->add_shape(-1);
  input->add_shape(int64_t{1} << 40);
  const nlohmann::json j = ProtoToJson(m);
  EXPECT_EQ(j["inputs"][0]["shape"], nlohmann::json::array({-1, int64_t{1} << 40}));
  EXPECT_EQ(j["versions"], nlohmann::json::array());  // repeated fields always present
  inference::ModelConfig config;
  config.add_input()->set_data_type(inference::TYPE_BF16);
  (*config.mutable_parameters())["embed_dim"].set_string_value("16");
  const nlohmann::json c = ProtoToJson(config);
  EXPECT_EQ(c["input"][0]["data_type"], "TYPE_BF16");
  EXPECT_EQ(c["parameters"]["embed_dim"]["string_value"], "16");
  EXPECT_EQ(c["max_batch_size"], 0);             // scalars with their default value too
  EXPECT_FALSE(c.contains("dynamic_batching"));  // unset messages are left out
}

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

TEST(TraceContext, ValidTraceparentsOnly) {
  EXPECT_EQ(TraceIdOf("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(TraceIdOf("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"), "");
  EXPECT_EQ(TraceIdOf("00-00000000000000000000000000000000-00f067aa0ba902b7-01"), "");
  EXPECT_EQ(TraceIdOf("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), "");
  EXPECT_EQ(TraceIdOf("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x"), "");
  EXPECT_EQ(TraceIdOf("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x"),
            "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(TraceIdOf(""), "");
}

}  // namespace
}  // namespace mha::serve::rest
