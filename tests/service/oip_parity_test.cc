// The Open Inference Protocol endpoint of a real mha-server (same port as mha.v1), through the
// generated inference.GRPCInferenceService stub: every fixture case through ModelInfer equals
// PyTorch's expected values; errors carry the code and message of mha.v1 Forward; health,
// metadata, config and statistics; ModelStreamInfer answers in order and survives a bad request.
#include <ATen/ATen.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>

#include "inference/grpc_service.grpc.pb.h"
#include "service_test_util.h"

namespace mha::testing {
namespace oip_parity_test {

using Stub = inference::GRPCInferenceService::Stub;

void AddInput(const char* name, const at::Tensor& tensor, inference::ModelInferRequest* r) {
  if (!tensor.defined()) return;
  const at::Tensor t = tensor.cpu().contiguous();
  auto* input = r->add_inputs();
  input->set_name(name);
  input->set_datatype(OipDatatype(t.scalar_type()));
  for (int64_t d : t.sizes()) input->add_shape(d);
  r->add_raw_input_contents()->assign(static_cast<const char*>(t.data_ptr()),
                                      static_cast<size_t>(t.numel()) * t.element_size());
}

void SetBool(const char* name, bool value, inference::ModelInferRequest* r) {
  (*r->mutable_parameters())[name].set_bool_param(value);
}

// The fixture case's inputs and flags as a ModelInferRequest (no outputs listed: the defaults).
inference::ModelInferRequest CaseInferRequest(const FixtureCase& c) {
  inference::ModelInferRequest r;
  r.set_model_name(c.name);
  r.set_id("case-" + c.name);
  AddInput("query", c.inputs.query, &r);
  AddInput("key", c.inputs.key, &r);
  AddInput("value", c.inputs.value, &r);
  AddInput("key_padding_mask", c.inputs.key_padding_mask, &r);
  AddInput("attn_mask", c.inputs.attn_mask, &r);
  SetBool("is_causal", c.inputs.is_causal, &r);
  SetBool("need_weights", c.inputs.need_weights, &r);
  SetBool("average_attn_weights", c.inputs.average_attn_weights, &r);
  return r;
}

// Output `name` of `r` as a float tensor; undefined when the response has no such output.
at::Tensor ResponseOutput(const inference::ModelInferResponse& r, const std::string& name) {
  for (int i = 0; i < r.outputs_size(); ++i) {
    if (r.outputs(i).name() != name) continue;
    EXPECT_EQ(r.outputs(i).datatype(), "FP32") << name;
    EXPECT_EQ(r.raw_output_contents_size(), r.outputs_size());
    if (i >= r.raw_output_contents_size()) return {};
    std::vector<int64_t> shape(r.outputs(i).shape().begin(), r.outputs(i).shape().end());
    at::Tensor out = at::empty(shape, at::kFloat);
    const std::string& raw = r.raw_output_contents(i);
    EXPECT_EQ(raw.size(), static_cast<size_t>(out.numel()) * sizeof(float)) << name;
    if (raw.size() != static_cast<size_t>(out.numel()) * sizeof(float)) return {};
    std::memcpy(out.data_ptr(), raw.data(), raw.size());
    return out;
  }
  return {};
}

class OipServer : public SharedServerTest<OipServer> {
 public:
  static SharedServerSpec Spec() {
    return {FixtureCaseNames(),
            "wrong_shape",
            {"--default-model", "self_basic", "--log-level", "debug"}};
  }

 protected:
  void SetUp() override {
    ASSERT_TRUE(shared_->error.empty()) << shared_->error;
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    stub_ = inference::GRPCInferenceService::NewStub(grpc::CreateCustomChannel(
        shared_->server->target(), grpc::InsecureChannelCredentials(), args));
  }
  static FixtureCase Case(const std::string& name) {
    auto c = LoadFixtureCase(name);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? c.value() : FixtureCase();
  }
  static std::unique_ptr<grpc::ClientContext> Context() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return context;
  }

  std::unique_ptr<Stub> stub_;
};

class OipCaseParity : public OipServer, public ::testing::WithParamInterface<std::string> {};

TEST_P(OipCaseParity, ModelInferMatchesPyTorch) {
  const FixtureCase c = Case(GetParam());
  inference::ModelInferResponse response;
  const grpc::Status s = stub_->ModelInfer(Context().get(), CaseInferRequest(c), &response);
  ASSERT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
  EXPECT_EQ(response.model_name(), c.name);
  EXPECT_EQ(response.id(), "case-" + c.name);
  EXPECT_TRUE(TensorsNear(ResponseOutput(response, "output"), c.expected_output, 1e-5)) << c.name;
  const at::Tensor weights = ResponseOutput(response, "attn_weights");
  if (c.inputs.need_weights) {
    EXPECT_TRUE(TensorsNear(weights, c.expected_weights, 1e-5)) << c.name << " attn_weights";
  } else {
    EXPECT_FALSE(weights.defined()) << c.name << ": weights sent though not asked for";
  }
}

INSTANTIATE_TEST_SUITE_P(AllFixtureCases, OipCaseParity, ::testing::ValuesIn(FixtureCaseNames()),
                         [](const auto& info) { return info.param; });

TEST_F(OipServer, ErrorsCarryTheCodeAndMessageOfMhaV1) {
  const FixtureCase c = Case("self_basic");
  const int64_t e = c.inputs.query.size(2);
  // Wrong embedding size, an unknown model, the FAILED model "broken": ServerCore words all three.
  for (const auto& [model, width] : std::vector<std::pair<std::string, int64_t>>{
           {"self_basic", e + 1}, {"no_such_model", e}, {"broken", e}}) {
    v1::ForwardRequest native = SelfAttentionRequest(model, 1, 3, width);
    inference::ModelInferRequest oip;
    oip.set_model_name(model);
    AddInput("query", at::full({1, 3, width}, 0.5f), &oip);
    auto expected = shared_->Client()->ForwardRaw(native);
    ASSERT_FALSE(expected.ok()) << model;
    inference::ModelInferResponse response;
    const grpc::Status s = stub_->ModelInfer(Context().get(), oip, &response);
    EXPECT_EQ(static_cast<int>(s.error_code()), static_cast<int>(expected.status().code()))
        << model;
    EXPECT_EQ(s.error_message(), expected.status().message()) << model;
  }
}

TEST_F(OipServer, HealthMetadataConfigAndStatistics) {
  inference::ServerReadyResponse ready;
  ASSERT_TRUE(stub_->ServerReady(Context().get(), {}, &ready).ok());
  EXPECT_TRUE(ready.ready());
  inference::ModelReadyRequest model_ready;
  model_ready.set_name("no_such_model");
  inference::ModelReadyResponse not_ready;
  ASSERT_TRUE(stub_->ModelReady(Context().get(), model_ready, &not_ready).ok());
  EXPECT_FALSE(not_ready.ready());

  const FixtureCase c = Case("self_basic");
  inference::ModelMetadataRequest metadata_request;
  metadata_request.set_name("self_basic");
  inference::ModelMetadataResponse metadata;
  ASSERT_TRUE(stub_->ModelMetadata(Context().get(), metadata_request, &metadata).ok());
  ASSERT_GE(metadata.inputs_size(), 1);
  EXPECT_EQ(metadata.inputs(0).name(), "query");
  EXPECT_EQ(metadata.inputs(0).shape(2), c.inputs.query.size(2));

  inference::ModelConfigRequest config_request;
  config_request.set_name("self_basic");
  inference::ModelConfigResponse config;
  ASSERT_TRUE(stub_->ModelConfig(Context().get(), config_request, &config).ok());
  EXPECT_EQ(config.config().max_batch_size(), 0);
  EXPECT_TRUE(config.config().has_dynamic_batching());

  inference::ModelInferResponse response;
  ASSERT_TRUE(stub_->ModelInfer(Context().get(), CaseInferRequest(c), &response).ok());
  inference::ModelStatisticsRequest stats_request;
  stats_request.set_name("self_basic");
  inference::ModelStatisticsResponse stats;
  ASSERT_TRUE(stub_->ModelStatistics(Context().get(), stats_request, &stats).ok());
  ASSERT_EQ(stats.model_stats_size(), 1);
  EXPECT_GE(stats.model_stats(0).inference_stats().success().count(), 1u);
  EXPECT_GE(stats.model_stats(0).execution_count(), 1u);
  // The computed requests' stages (docs/performance.md's breakdown): one count for all three
  // phases.
  const inference::InferStatistics& phases = stats.model_stats(0).inference_stats();
  EXPECT_GE(phases.compute_infer().count(), 1u);
  EXPECT_GT(phases.compute_infer().ns(), 0u);
  EXPECT_EQ(phases.compute_input().count(), phases.compute_infer().count());
  EXPECT_EQ(phases.compute_output().count(), phases.compute_infer().count());
}

TEST_F(OipServer, StreamAnswersInOrderAndABadRequestDoesNotEndIt) {
  const FixtureCase c = Case("self_basic");
  auto context = Context();
  auto stream = stub_->ModelStreamInfer(context.get());
  inference::ModelInferRequest bad = CaseInferRequest(c);
  bad.set_id("bad");
  bad.mutable_inputs(0)->set_datatype("INT64");
  for (const char* id : {"first", "bad", "third"}) {
    inference::ModelInferRequest request = std::string(id) == "bad" ? bad : CaseInferRequest(c);
    request.set_id(id);
    ASSERT_TRUE(stream->Write(request));
  }
  stream->WritesDone();
  inference::ModelStreamInferResponse answer;
  for (const char* id : {"first", "bad", "third"}) {
    ASSERT_TRUE(stream->Read(&answer)) << id;
    EXPECT_EQ(answer.infer_response().id(), id);
    if (std::string(id) == "bad") {
      EXPECT_EQ(answer.error_message(),
                "INVALID_ARGUMENT: query: datatype 'INT64' is not supported (use FP32, FP16, "
                "BF16 or BOOL)");
    } else {
      EXPECT_EQ(answer.error_message(), "");
      EXPECT_TRUE(
          TensorsNear(ResponseOutput(answer.infer_response(), "output"), c.expected_output, 1e-5));
    }
  }
  EXPECT_FALSE(stream->Read(&answer));
  const grpc::Status s = stream->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
}

}  // namespace oip_parity_test
}  // namespace mha::testing
