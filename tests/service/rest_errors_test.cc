// Errors of the KServe v2 REST endpoint of a real mha-server: the HTTP status of each code
// (server/frontends/rest/http_status.h) and gRPC's message, word for word, for the same request
// sent through gRPC ModelInfer; bodies that are not JSON, too deep, too large or framed wrongly
// are refused and the server goes on answering.
#include <ATen/ATen.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>

#include "inference/grpc_service.grpc.pb.h"
#include "rest_test_util.h"
#include "service_test_util.h"

namespace mha::testing {
namespace rest_errors_test {

class RestErrors : public SharedServerTest<RestErrors> {
 public:
  static SharedServerSpec Spec() {
    return {{"self_basic"}, "wrong_shape", {"--max-message-bytes", "1048576"}};
  }

 protected:
  void SetUp() override {
    ASSERT_TRUE(shared_->error.empty()) << shared_->error;
    ASSERT_GT(shared_->server->http_port(), 0) << shared_->server->log();
    http_ = RestClient(shared_->server->http_port());
  }
  RestAnswer Post(const std::string& model, const std::string& body,
                  std::optional<size_t> header_length = std::nullopt) {
    return RestCall(*http_, "POST", "/v2/models/" + model + "/infer", body, header_length);
  }
  // The gRPC ModelInfer answer to a query of shape [1, 3, width] for `model`.
  grpc::Status GrpcAnswer(const std::string& model, int64_t width) {
    auto stub = inference::GRPCInferenceService::NewStub(
        grpc::CreateChannel(shared_->server->target(), grpc::InsecureChannelCredentials()));
    inference::ModelInferRequest r;
    r.set_model_name(model);
    auto* input = r.add_inputs();
    input->set_name("query");
    input->set_datatype("FP32");
    for (int64_t d : {int64_t{1}, int64_t{3}, width}) input->add_shape(d);
    r.add_raw_input_contents()->assign(static_cast<size_t>(3 * width) * sizeof(float), '\0');
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    inference::ModelInferResponse response;
    return stub->ModelInfer(&context, r, &response);
  }
  static nlohmann::json QueryBody(int64_t width) {
    nlohmann::json body = {{"inputs", nlohmann::json::array()}};
    std::string unused;
    AddRestInput("query", at::full({1, 3, width}, 0.0f), TensorForm::kFlat, &body, &unused);
    return body;
  }

  std::unique_ptr<httplib::Client> http_;
};

TEST_F(RestErrors, CoreErrorsHaveTheirHttpStatusAndTheGrpcMessage) {
  struct Case {
    std::string model;
    int64_t width;
    int http_status;
  };
  for (const Case& c :
       {Case{"self_basic", 17, 400}, Case{"no_such_model", 16, 404}, Case{"broken", 16, 400}}) {
    const grpc::Status expected = GrpcAnswer(c.model, c.width);
    ASSERT_FALSE(expected.ok()) << c.model;
    const RestAnswer a = Post(c.model, QueryBody(c.width).dump());
    EXPECT_EQ(a.status, c.http_status) << c.model << ": " << a.json.dump();
    EXPECT_EQ(RestError(a), expected.error_message()) << c.model;
  }
}

TEST_F(RestErrors, MalformedBodiesAreBadRequestsWithTheReason) {
  const std::string query = QueryBody(16).dump();
  struct Case {
    std::string body;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"{\"inputs\": [", "request body is not valid JSON (12 bytes)"},
      {"[1, 2]", "request body: must be a JSON object"},
      {"{}", "inputs: required, an array of tensors"},
      {"{\"inputs\": [], \"model\": 1}", "request: unknown key 'model'"},
      {std::string(40, '[') + std::string(40, ']'), "deeper than 32 levels"},
      {"{\"inputs\": [{\"name\": \"query\", \"datatype\": \"FP32\", \"shape\": [1, 2, 16], "
       "\"data\": [1, 2, 3]}]}",
       "query: data has 3 values, shape [1, 2, 16] needs 32"},
      {"{\"inputs\": [{\"name\": \"query\", \"datatype\": \"FP32\", \"shape\": [1, 1, 1], "
       "\"data\": [\"x\"]}]}",
       "query: data has 1 values that are neither numbers nor true/false"},
      {"{\"inputs\": [{\"name\": \"query\", \"datatype\": \"INT64\", \"shape\": [1], "
       "\"data\": [1]}]}",
       "query: datatype 'INT64' is not supported (use FP32, FP16, BF16 or BOOL)"},
      {"{\"inputs\": [{\"name\": \"query\", \"datatype\": \"FP32\", \"shape\": [1]}]}",
       "inputs[0]: no data (neither data nor parameters.binary_data_size)"},
  };
  for (const Case& c : cases) {
    const RestAnswer a = Post("self_basic", c.body);
    EXPECT_EQ(a.status, 400) << c.body.substr(0, 80) << " -> " << a.json.dump();
    EXPECT_TRUE(Contains(RestError(a), c.message)) << c.body.substr(0, 80);
  }
  // More JSON values outside the tensors' data than the parser keeps.
  std::string many = "{\"inputs\": [], \"id\": [0";
  for (int i = 0; i < 70000; ++i) many += ",0";
  const RestAnswer a = Post("self_basic", many + "]}");
  EXPECT_EQ(a.status, 400);
  EXPECT_TRUE(Contains(RestError(a), "values outside the inputs' data"));
  EXPECT_EQ(Post("self_basic", query).status, 200) << "the server still answers";
}

TEST_F(RestErrors, BinaryFramingIsChecked) {
  const at::Tensor q = at::zeros({1, 3, 16});
  nlohmann::json body = {{"inputs", nlohmann::json::array()}};
  std::string binary;
  AddRestInput("query", q, TensorForm::kBinary, &body, &binary);
  const std::string json = body.dump();
  // Two bytes short: the binary_data_size names more than there is.
  RestAnswer a = Post("self_basic", json + binary.substr(2), json.size());
  EXPECT_EQ(a.status, 400);
  EXPECT_TRUE(Contains(RestError(a), "binary_data_size: must be a count of bytes"));
  a = Post("self_basic", json + binary + "xx", json.size());  // two bytes too many
  EXPECT_EQ(a.status, 400);
  EXPECT_TRUE(Contains(RestError(a), "bytes follow the JSON header"));
  a = Post("self_basic", json + binary, json.size() + 1000000);
  EXPECT_EQ(a.status, 400);
  EXPECT_TRUE(Contains(RestError(a), "Inference-Header-Content-Length"));
  // A binary size that does not match the shape: the decoder's message, as on gRPC.
  body["inputs"][0]["parameters"]["binary_data_size"] = binary.size() - 4;
  const std::string short_json = body.dump();
  a = Post("self_basic", short_json + binary.substr(4), short_json.size());
  EXPECT_EQ(a.status, 400);
  EXPECT_TRUE(Contains(RestError(a), "query: data has 188 bytes")) << RestError(a);
  EXPECT_EQ(Post("self_basic", json + binary, json.size()).status, 200);
}

TEST_F(RestErrors, TooLargeUnknownPathsAndMethods) {
  const RestAnswer big = Post("self_basic", std::string(2 << 20, ' '));  // over 1 MiB
  EXPECT_EQ(big.status, 413);
  EXPECT_TRUE(Contains(RestError(big), "over --max-message-bytes 1048576"));
  const RestAnswer path = RestCall(*http_, "GET", "/v3/nothing");
  EXPECT_EQ(path.status, 404);
  EXPECT_TRUE(Contains(RestError(path), "no such endpoint"));
  const RestAnswer unknown = RestCall(*http_, "GET", "/v2/models/no_such_model");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_TRUE(Contains(RestError(unknown), "no_such_model"));
  EXPECT_EQ(Post("self_basic", QueryBody(16).dump()).status, 200);
}

// A compressed body would be inflated by the HTTP library past every limit: refused unread (a
// body that is not gzip at all shows it: read first, it would be a 400 from the library).
TEST_F(RestErrors, CompressedBodiesAreRefusedBeforeTheyAreRead) {
  const RestAnswer a = RestCall(*http_, "POST", "/v2/models/self_basic/infer", "not gzip at all",
                                std::nullopt, {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(a.status, 415);
  EXPECT_TRUE(Contains(RestError(a), "Content-Encoding 'gzip' is not accepted"));
  EXPECT_EQ(Post("self_basic", QueryBody(16).dump()).status, 200);
}

// Parameters are never silently ignored: an unknown one is refused naming it, on REST and on
// gRPC ModelInfer alike; Triton's reserved `priority` is accepted and `timeout` (us) is the
// request's deadline (1 us has always passed by the time the scheduler looks).
TEST_F(RestErrors, UnknownParametersAreRefusedTimeoutIsTheDeadline) {
  nlohmann::json body = QueryBody(16);
  body["parameters"] = {{"is_causl", true}};
  RestAnswer a = Post("self_basic", body.dump());
  EXPECT_EQ(a.status, 400);
  EXPECT_TRUE(Contains(RestError(a), "parameters: unknown parameter 'is_causl'"));
  body["parameters"] = {{"priority", 1}, {"timeout", 60000000}};
  EXPECT_EQ(Post("self_basic", body.dump()).status, 200);
  body["parameters"] = {{"timeout", 1}};
  a = Post("self_basic", body.dump());
  EXPECT_EQ(a.status, 504) << a.json.dump();
  body["parameters"] = {{"timeout", -5}};
  EXPECT_EQ(Post("self_basic", body.dump()).status, 400);
  body = QueryBody(16);
  body["inputs"][0]["parameters"] = {{"shared_memory_region", "r"}};
  a = Post("self_basic", body.dump());
  EXPECT_EQ(a.status, 400);
  EXPECT_TRUE(Contains(RestError(a),
                       "inputs[0]: data (or binary_data_size) and "
                       "parameters.shared_memory_region on the same tensor"));
  body["inputs"][0].erase("data");  // a region without its byte size
  a = Post("self_basic", body.dump());
  EXPECT_EQ(a.status, 400);
  EXPECT_TRUE(Contains(RestError(a),
                       "query: parameters.shared_memory_region 'r' without "
                       "shared_memory_byte_size"));
  body = QueryBody(16);
  body["inputs"][0]["parameters"] = {{"color", "red"}};
  a = Post("self_basic", body.dump());
  EXPECT_TRUE(Contains(RestError(a), "inputs[0].parameters: 'color' is not supported"));

  auto stub = inference::GRPCInferenceService::NewStub(
      grpc::CreateChannel(shared_->server->target(), grpc::InsecureChannelCredentials()));
  const auto grpc_infer = [&stub](const char* name, int64_t value) {
    inference::ModelInferRequest r;
    r.set_model_name("self_basic");
    auto* input = r.add_inputs();
    input->set_name("query");
    input->set_datatype("FP32");
    for (int64_t d : {1, 3, 16}) input->add_shape(d);
    r.add_raw_input_contents()->assign(3 * 16 * sizeof(float), '\0');
    (*r.mutable_parameters())[name].set_int64_param(value);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    inference::ModelInferResponse response;
    return stub->ModelInfer(&context, r, &response);
  };
  grpc::Status s = grpc_infer("is_causl", 1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(s.error_message(), "parameters: unknown parameter 'is_causl'"));
  EXPECT_TRUE(grpc_infer("priority", 2).ok());
  EXPECT_EQ(grpc_infer("timeout", 1).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(grpc_infer("timeout", 60000000).ok());
}

// Triton's repository extension over REST, with the gRPC calls' admin token and messages.
TEST(RestRepository, IndexLoadAndUnloadNeedTheAdminToken) {
  ModelRepositoryDir repository({"self_basic"});
  TempDir dir;
  std::ofstream(dir.File("token")) << "s3cret\n";
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--model-repository", repository.path(), "--model-control-mode",
                            "explicit", "--admin-token-file", dir.File("token")}));
  httplib::Client http("127.0.0.1", server.http_port());
  http.set_read_timeout(60, 0);
  RestAnswer a = RestCall(http, "POST", "/v2/repository/index", "{}");
  EXPECT_EQ(a.status, 401);
  EXPECT_TRUE(Contains(RestError(a), "Bearer <token>"));
  a = RestCall(http, "POST", "/v2/repository/index", "{}", std::nullopt,
               {{"Authorization", "Bearer wrong"}});
  EXPECT_EQ(a.status, 403);
  const httplib::Headers admin = {{"Authorization", "Bearer s3cret"}};
  a = RestCall(http, "POST", "/v2/repository/index", "{}", std::nullopt, admin);
  ASSERT_EQ(a.status, 200) << a.json.dump();
  ASSERT_EQ(a.json.size(), 1u) << a.json.dump();
  EXPECT_EQ(a.json[0]["name"], "self_basic");
  EXPECT_EQ(a.json[0]["state"], "READY");
  a = RestCall(http, "POST", "/v2/repository/models/self_basic/load",
               R"({"parameters": {"config": "{}"}})", std::nullopt, admin);
  EXPECT_EQ(a.status, 400);
  EXPECT_TRUE(Contains(RestError(a), "'config' is not supported"));
  EXPECT_EQ(
      RestCall(http, "POST", "/v2/repository/models/self_basic/unload", "", std::nullopt, admin)
          .status,
      200);
  EXPECT_NE(RestCall(http, "GET", "/v2/models/self_basic/ready").status, 200);
  EXPECT_EQ(RestCall(http, "POST", "/v2/repository/models/self_basic/load", "", std::nullopt, admin)
                .status,
            200);
  EXPECT_EQ(RestCall(http, "GET", "/v2/models/self_basic/ready").status, 200);
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

}  // namespace rest_errors_test
}  // namespace mha::testing
