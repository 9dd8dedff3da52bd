// Triton's sequence extension on decoding sessions (server/frontends/oip/sequence.h) through a
// real mha-server, over gRPC ModelInfer and over REST: a prefill with sequence_start plus single
// steps equals one full causal forward (fixture decode_causal, PyTorch, fp32 1e-5); four
// sequences interleaved step by step each equal it; a step after sequence_end is refused with the
// session's NOT_FOUND (never answered statelessly), and so is one for a sequence never started.
#include <ATen/ATen.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "inference/grpc_service.grpc.pb.h"
#include "rest_test_util.h"
#include "service_test_util.h"

namespace mha::testing {
namespace sequence_test {

constexpr int64_t kPrefill = 5;  // tokens of the first request; the others one at a time

class Sequences : public SharedServerTest<Sequences> {
 public:
  static SharedServerSpec Spec() { return {{"decode_causal"}, "", {}}; }

 protected:
  void SetUp() override {
    ASSERT_TRUE(shared_->error.empty()) << shared_->error;
    http_ = RestClient(shared_->server->http_port());
    stub_ = inference::GRPCInferenceService::NewStub(
        grpc::CreateChannel(shared_->server->target(), grpc::InsecureChannelCredentials()));
    auto c = LoadFixtureCase("decode_causal");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    case_ = c.value();
  }
  // Tokens [begin, end) of the case's query.
  at::Tensor Tokens(int64_t begin, int64_t end) const {
    return case_.inputs.query.slice(1, begin, end).contiguous();
  }
  // One step over REST: {"error"} answers come back as an undefined tensor and *error.
  at::Tensor RestStep(int64_t id, const at::Tensor& q, bool start, bool end, int* status) {
    nlohmann::json body = {{"inputs", nlohmann::json::array()},
                           {"parameters", {{"sequence_id", id}}}};
    if (start) body["parameters"]["sequence_start"] = true;
    if (end) body["parameters"]["sequence_end"] = true;
    std::string binary;
    AddRestInput("query", q, TensorForm::kBinary, &body, &binary);
    body["parameters"]["binary_data_output"] = true;
    const std::string json = body.dump();
    const RestAnswer a =
        RestCall(*http_, "POST", "/v2/models/decode_causal/infer", json + binary, json.size());
    *status = a.status;
    last_error_ = RestError(a);
    return a.status == 200 ? RestOutput(a, "output") : at::Tensor();
  }
  // One step over gRPC ModelInfer with a string sequence id.
  at::Tensor GrpcStep(const std::string& id, const at::Tensor& q, bool start, bool end,
                      grpc::Status* status) {
    inference::ModelInferRequest r;
    r.set_model_name("decode_causal");
    auto* input = r.add_inputs();
    input->set_name("query");
    input->set_datatype("FP32");
    for (int64_t d : q.sizes()) input->add_shape(d);
    r.add_raw_input_contents()->assign(static_cast<const char*>(q.data_ptr()),
                                       static_cast<size_t>(q.numel()) * sizeof(float));
    auto& p = *r.mutable_parameters();
    p["sequence_id"].set_string_param(id);
    if (start) p["sequence_start"].set_bool_param(true);
    if (end) p["sequence_end"].set_bool_param(true);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    inference::ModelInferResponse response;
    *status = stub_->ModelInfer(&context, r, &response);
    if (!status->ok() || response.raw_output_contents_size() < 1) return {};
    std::vector<int64_t> shape(response.outputs(0).shape().begin(),
                               response.outputs(0).shape().end());
    at::Tensor out = at::empty(shape, at::kFloat);
    std::memcpy(out.data_ptr(), response.raw_output_contents(0).data(),
                response.raw_output_contents(0).size());
    return out;
  }

  std::unique_ptr<httplib::Client> http_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
  FixtureCase case_;
  std::string last_error_;
};

TEST_F(Sequences, RestPrefillAndStepsEqualOneCausalForwardInterleaved) {
  const int64_t t = case_.inputs.query.size(1);
  std::vector<std::vector<at::Tensor>> outputs(4);
  for (int64_t step = 0; step == 0 || kPrefill + step - 1 < t; ++step) {
    for (int64_t s = 0; s < 4; ++s) {  // four sequences, one step each in turn
      const int64_t begin = step == 0 ? 0 : kPrefill + step - 1;
      const int64_t end = step == 0 ? kPrefill : begin + 1;
      int status = 0;
      outputs[s].push_back(RestStep(100 + s, Tokens(begin, end), step == 0, end == t, &status));
      ASSERT_EQ(status, 200) << "sequence " << s << " step " << step << ": " << last_error_;
    }
  }
  for (int64_t s = 0; s < 4; ++s) {
    EXPECT_TRUE(TensorsNear(at::cat(outputs[s], 1), case_.expected_output, 1e-5)) << s;
  }
  int status = 0;
  EXPECT_FALSE(RestStep(100, Tokens(0, 1), false, false, &status).defined());
  EXPECT_EQ(status, 404);
  EXPECT_TRUE(Contains(last_error_, "was closed")) << last_error_;
  EXPECT_FALSE(RestStep(999, Tokens(0, 1), false, false, &status).defined());
  EXPECT_EQ(status, 404);
  EXPECT_TRUE(Contains(last_error_, "seq-999")) << last_error_;
}

TEST_F(Sequences, GrpcPrefillAndStepsEqualOneCausalForward) {
  const int64_t t = case_.inputs.query.size(1);
  grpc::Status status;
  std::vector<at::Tensor> outputs;
  outputs.push_back(GrpcStep("abc", Tokens(0, kPrefill), true, false, &status));
  ASSERT_TRUE(status.ok()) << status.error_message();
  // Starting it again while it is open is refused.
  GrpcStep("abc", Tokens(0, 1), true, false, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::ALREADY_EXISTS) << status.error_message();
  for (int64_t i = kPrefill; i < t; ++i) {
    outputs.push_back(GrpcStep("abc", Tokens(i, i + 1), false, i + 1 == t, &status));
    ASSERT_TRUE(status.ok()) << i << ": " << status.error_message();
  }
  EXPECT_TRUE(TensorsNear(at::cat(outputs, 1), case_.expected_output, 1e-5));
  GrpcStep("abc", Tokens(0, 1), false, false, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(Contains(status.error_message(), "was closed")) << status.error_message();
  GrpcStep("", Tokens(0, 1), true, false, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
}

}  // namespace sequence_test
}  // namespace mha::testing
