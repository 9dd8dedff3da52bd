// The KServe v2 HTTP/REST endpoint of a real mha-server (--http-address), through an HTTP client
// written from the specification (rest_test_util.h): every fixture case in JSON and in the binary
// tensor extension equals PyTorch; weights only when asked; the id and the request id echoed;
// health, metadata, config and statistics have the gRPC front end's content; errors carry the
// HTTP status of their code and gRPC's message; NaN and infinities in tensor data, in and out.
#include <ATen/ATen.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "inference/grpc_service.grpc.pb.h"
#include "rest_test_util.h"
#include "service_test_util.h"

namespace mha::testing {
namespace rest_test {

class RestServer : public SharedServerTest<RestServer> {
 public:
  static SharedServerSpec Spec() {
    return {FixtureCaseNames(),
            "wrong_shape",
            {"--default-model", "self_basic", "--max-message-bytes", "1048576", "--log-level",
             "debug"}};
  }

 protected:
  void SetUp() override {
    ASSERT_TRUE(shared_->error.empty()) << shared_->error;
    ASSERT_GT(shared_->server->http_port(), 0) << shared_->server->log();
    http_ = RestClient(shared_->server->http_port());
  }
  static FixtureCase Case(const std::string& name) {
    auto c = LoadFixtureCase(name);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? c.value() : FixtureCase();
  }
  // The case's inputs and flags as a REST infer body; binary bytes go to *binary.
  static nlohmann::json CaseBody(const FixtureCase& c, TensorForm form, std::string* binary) {
    nlohmann::json body = {{"id", "case-" + c.name},
                           {"inputs", nlohmann::json::array()},
                           {"parameters",
                            {{"is_causal", c.inputs.is_causal},
                             {"need_weights", c.inputs.need_weights},
                             {"average_attn_weights", c.inputs.average_attn_weights}}}};
    AddRestInput("query", c.inputs.query, form, &body, binary);
    AddRestInput("key", c.inputs.key, form, &body, binary);
    AddRestInput("value", c.inputs.value, form, &body, binary);
    AddRestInput("key_padding_mask", c.inputs.key_padding_mask, form, &body, binary);
    AddRestInput("attn_mask", c.inputs.attn_mask, form, &body, binary);
    if (form == TensorForm::kBinary) body["parameters"]["binary_data_output"] = true;
    return body;
  }
  RestAnswer Infer(const std::string& model, const nlohmann::json& body,
                   const std::string& binary = "", bool framed = false) {
    const std::string json = body.dump();
    return RestCall(*http_, "POST", "/v2/models/" + model + "/infer", json + binary,
                    framed ? std::optional<size_t>(json.size()) : std::nullopt);
  }
  void ExpectMatches(const RestAnswer& a, const FixtureCase& c) {
    ASSERT_EQ(a.status, 200) << a.json.dump();
    EXPECT_EQ(a.json["model_name"], c.name);
    EXPECT_EQ(a.json["id"], "case-" + c.name);
    EXPECT_TRUE(TensorsNear(RestOutput(a, "output"), c.expected_output, 1e-5)) << c.name;
    const at::Tensor weights = RestOutput(a, "attn_weights");
    if (c.inputs.need_weights) {
      EXPECT_TRUE(TensorsNear(weights, c.expected_weights, 1e-5)) << c.name << " attn_weights";
    } else {
      EXPECT_FALSE(weights.defined()) << c.name << ": weights sent though not asked for";
      EXPECT_EQ(a.json["outputs"].size(), 1u) << a.json.dump();
    }
  }

  std::unique_ptr<httplib::Client> http_;
};

class RestCaseParity : public RestServer, public ::testing::WithParamInterface<std::string> {};

TEST_P(RestCaseParity, JsonDataMatchesPyTorch) {
  const FixtureCase c = Case(GetParam());
  std::string unused;
  const RestAnswer a = Infer(c.name, CaseBody(c, TensorForm::kFlat, &unused));
  ExpectMatches(a, c);
  EXPECT_FALSE(a.json["outputs"][0].contains("parameters")) << "JSON data unless binary asked";
  EXPECT_EQ(a.binary, "");
}

TEST_P(RestCaseParity, BinaryTensorsMatchPyTorch) {
  const FixtureCase c = Case(GetParam());
  std::string binary;
  const nlohmann::json body = CaseBody(c, TensorForm::kBinary, &binary);
  const RestAnswer a = Infer(c.name, body, binary, /*framed=*/true);
  ExpectMatches(a, c);
  EXPECT_TRUE(a.json["outputs"][0]["parameters"].contains("binary_data_size")) << a.json.dump();
}

INSTANTIATE_TEST_SUITE_P(AllFixtureCases, RestCaseParity, ::testing::ValuesIn(FixtureCaseNames()),
                         [](const auto& info) { return info.param; });

TEST_F(RestServer, NestedDataPerOutputBinaryAndEchoedHeaders) {
  const FixtureCase c = Case("self_avg_weights");
  std::string unused;
  nlohmann::json body = CaseBody(c, TensorForm::kNested, &unused);
  body["parameters"]["need_weights"] = true;
  // Only the weights in binary, in the order listed.
  body["outputs"] = {{{"name", "attn_weights"}, {"parameters", {{"binary_data", true}}}},
                     {{"name", "output"}}};
  const std::string traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const RestAnswer a =
      RestCall(*http_, "POST", "/v2/models/self_avg_weights/infer", body.dump(), std::nullopt,
               {{"X-Request-Id", "rest-req-1"}, {"traceparent", traceparent}});
  ASSERT_EQ(a.status, 200) << a.json.dump();
  ASSERT_EQ(a.json["outputs"].size(), 2u);
  EXPECT_EQ(a.json["outputs"][0]["name"], "attn_weights");
  EXPECT_TRUE(a.json["outputs"][0]["parameters"].contains("binary_data_size"));
  EXPECT_TRUE(a.json["outputs"][1].contains("data"));
  EXPECT_TRUE(TensorsNear(RestOutput(a, "output"), c.expected_output, 1e-5));
  EXPECT_TRUE(TensorsNear(RestOutput(a, "attn_weights"), c.expected_weights, 1e-5));
  const auto header = [&a](const char* key) {
    const auto it = a.headers.find(key);
    return it == a.headers.end() ? std::string() : it->second;
  };
  EXPECT_EQ(header("X-Request-Id"), "rest-req-1");
  EXPECT_EQ(header("traceparent"), traceparent);
  EXPECT_TRUE(Contains(shared_->server->log(), "trace_id=4bf92f3577b34da6a3ce929d0e0e4736"));
}

// tritonclient.http sends a float mask's -inf as -Infinity (Python's json.dumps),
// and Triton takes it. A raw body with -Infinity in a float attn_mask answers as the same mask as
// BOOL does. The query row whose every key is masked is NaN in the output and the weights (as in
// PyTorch: 1.13 gives NaN for such a row) and comes back as bare NaN tokens, as Python writes
// them; the other rows are finite. NaN anywhere but an input's data is still invalid JSON.
TEST_F(RestServer, NonFiniteMaskValuesInAndOut) {
  const at::Tensor query = Case("self_basic").inputs.query.contiguous();
  const int64_t t = query.size(1);
  ASSERT_GE(t, 3);
  std::string float_mask, bool_mask;  // query row 0: key 1 masked; query row 1: every key
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j < t; ++j) {
      const bool masked = (i == 0 && j == 1) || i == 1;
      const std::string comma = i + j > 0 ? ", " : "";
      float_mask += comma + (masked ? "-Infinity" : "0.0");
      bool_mask += comma + (masked ? "true" : "false");
    }
  }
  const std::string query_json = R"({"name": "query", "datatype": "FP32", "shape": )" +
                                 nlohmann::json(query.sizes().vec()).dump() + R"(, "data": )" +
                                 FlatData(query).dump() + "}";
  const auto body = [&](const std::string& datatype, const std::string& mask) {
    return R"({"parameters": {"need_weights": true, "average_attn_weights": true}, "inputs": [)" +
           query_json + R"(, {"name": "attn_mask", "datatype": ")" + datatype + R"(", "shape": [)" +
           std::to_string(t) + ", " + std::to_string(t) + R"(], "data": [)" + mask + "]}]}";
  };
  const std::string path = "/v2/models/self_basic/infer";
  const RestAnswer with_float = RestCall(*http_, "POST", path, body("FP32", float_mask));
  const RestAnswer with_bool = RestCall(*http_, "POST", path, body("BOOL", bool_mask));
  ASSERT_EQ(with_float.status, 200) << with_float.text;
  ASSERT_EQ(with_bool.status, 200) << with_bool.text;
  EXPECT_TRUE(Contains(with_float.text, "[NaN,NaN,") || Contains(with_float.text, ",NaN,NaN,"));
  EXPECT_FALSE(Contains(with_float.text, "null"));
  const at::Tensor out = RestOutput(with_float, "output");
  const at::Tensor weights = RestOutput(with_float, "attn_weights");
  const at::Tensor bool_out = RestOutput(with_bool, "output");
  const at::Tensor bool_weights = RestOutput(with_bool, "attn_weights");
  ASSERT_TRUE(out.defined() && weights.defined() && bool_out.defined() && bool_weights.defined());
  EXPECT_TRUE(at::isnan(out.select(1, 1)).all().item<bool>()) << out;
  EXPECT_TRUE(at::isnan(weights.select(1, 1)).all().item<bool>()) << weights;
  EXPECT_TRUE(at::isfinite(out.select(1, 0)).all().item<bool>()) << out;
  EXPECT_TRUE(at::isfinite(out.narrow(1, 2, t - 2)).all().item<bool>()) << out;
  EXPECT_TRUE((weights.select(1, 0).select(-1, 1) == 0).all().item<bool>()) << weights;
  EXPECT_TRUE(at::allclose(out, bool_out, 1e-6, 1e-6, /*equal_nan=*/true)) << out << bool_out;
  EXPECT_TRUE(at::allclose(weights, bool_weights, 1e-6, 1e-6, /*equal_nan=*/true));

  const RestAnswer infinite_query =
      RestCall(*http_, "POST", path,
               R"({"inputs": [{"name": "query", "datatype": "FP32", "shape": [1, 1, 16], "data": [)"
               R"(Infinity, NaN, -Infinity, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]}]})");
  EXPECT_EQ(infinite_query.status, 200) << infinite_query.text;
  for (const std::string not_data :
       {R"(, "parameters": {"need_weights": NaN}})", R"(, "id": Infinity})"}) {
    const RestAnswer refused =
        RestCall(*http_, "POST", path, R"({"inputs": [)" + query_json + "]" + not_data);
    EXPECT_EQ(refused.status, 400) << refused.text;
    EXPECT_TRUE(Contains(RestError(refused), "request body is not valid JSON ("));
    EXPECT_TRUE(Contains(RestError(refused), "accepted only as values of an input's data"));
  }
}

// W3C trace context on gRPC too: a valid traceparent in the metadata is echoed in the initial
// metadata and its trace id logged with the request id; a malformed one is neither.
TEST_F(RestServer, GrpcEchoesAndLogsAValidTraceparent) {
  auto stub = inference::GRPCInferenceService::NewStub(
      grpc::CreateChannel(shared_->server->target(), grpc::InsecureChannelCredentials()));
  for (const std::string traceparent :
       {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "00-not-a-trace"}) {
    grpc::ClientContext context;
    context.AddMetadata("traceparent", traceparent);
    inference::ServerLiveResponse live;
    ASSERT_TRUE(stub->ServerLive(&context, {}, &live).ok());
    const auto& metadata = context.GetServerInitialMetadata();
    const auto echoed = metadata.find("traceparent");
    if (traceparent.size() == 55) {
      ASSERT_NE(echoed, metadata.end());
      EXPECT_EQ(std::string(echoed->second.data(), echoed->second.size()), traceparent);
    } else {
      EXPECT_EQ(echoed, metadata.end()) << "a malformed traceparent is not echoed";
    }
  }
  EXPECT_TRUE(Contains(shared_->server->log(), "trace_id=0af7651916cd43dd8448eb211c80319c"));
}

TEST_F(RestServer, HealthMetadataConfigAndStatistics) {
  EXPECT_EQ(RestCall(*http_, "GET", "/v2/health/live").json["live"], true);
  const RestAnswer ready = RestCall(*http_, "GET", "/v2/health/ready");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(ready.json["ready"], true);
  const RestAnswer server = RestCall(*http_, "GET", "/v2");
  EXPECT_EQ(server.json["name"], "mha-serve");
  EXPECT_NE(server.json["extensions"].dump().find("binary_tensor_data"), std::string::npos);
  EXPECT_EQ(RestCall(*http_, "GET", "/v2/models/self_basic/ready").status, 200);
  EXPECT_EQ(RestCall(*http_, "GET", "/v2/models/self_basic/versions/1/ready").status, 200);
  EXPECT_EQ(RestCall(*http_, "GET", "/v2/models/no_such_model/ready").status, 404);

  const FixtureCase c = Case("self_basic");
  const RestAnswer metadata = RestCall(*http_, "GET", "/v2/models/self_basic");
  ASSERT_EQ(metadata.status, 200);
  EXPECT_EQ(metadata.json["name"], "self_basic");
  EXPECT_EQ(metadata.json["versions"], nlohmann::json::array({"1"}));
  EXPECT_EQ(metadata.json["inputs"][0]["name"], "query");
  EXPECT_EQ(metadata.json["inputs"][0]["datatype"], "FP32");
  EXPECT_EQ(metadata.json["inputs"][0]["shape"],
            nlohmann::json::array({-1, -1, c.inputs.query.size(2)}));  // numbers, not strings

  const RestAnswer config = RestCall(*http_, "GET", "/v2/models/self_basic/config");
  ASSERT_EQ(config.status, 200);
  EXPECT_EQ(config.json["max_batch_size"], 0);
  EXPECT_EQ(config.json["input"][0]["data_type"], "TYPE_FP32");
  EXPECT_TRUE(config.json.contains("dynamic_batching")) << config.json.dump();

  std::string unused;
  ASSERT_EQ(Infer("self_basic", CaseBody(c, TensorForm::kFlat, &unused)).status, 200);
  const RestAnswer stats = RestCall(*http_, "GET", "/v2/models/self_basic/stats");
  ASSERT_EQ(stats.status, 200);
  ASSERT_EQ(stats.json["model_stats"].size(), 1u);
  EXPECT_GE(stats.json["model_stats"][0]["inference_stats"]["success"]["count"].get<int64_t>(), 1);
  EXPECT_GE(stats.json["model_stats"][0]["execution_count"].get<int64_t>(), 1);
  const RestAnswer all = RestCall(*http_, "GET", "/v2/models/stats");
  EXPECT_EQ(all.status, 200);
  EXPECT_GT(all.json["model_stats"].size(), 1u);
}

}  // namespace rest_test
}  // namespace mha::testing
