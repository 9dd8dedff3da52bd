// The head options through the Open Inference Protocol endpoint of a real mha-server: every
// request of tests/fixtures/heads as ModelInfer parameters (named like the mha.v1 fields) and a
// head_mask input, answered with outputs named like the ForwardResponse fields, equal to the same
// PyTorch references; and the OIP-only errors (parameter kinds, outputs that contradict them).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <functional>

#include "heads_util.h"
#include "inference/grpc_service.grpc.pb.h"

namespace mha::testing {
namespace oip_heads_test {

void AddInput(const std::string& name, const at::Tensor& tensor, inference::ModelInferRequest* r) {
  if (!tensor.defined()) return;
  v1::Tensor wire;
  ASSERT_TRUE(codec::EncodeTensor(ToHost(tensor), &wire).ok());  // in its own dtype
  auto* input = r->add_inputs();
  input->set_name(name);
  input->set_datatype(wire.dtype() == v1::BOOL ? "BOOL" : "FP32");
  input->mutable_shape()->CopyFrom(wire.shape());
  r->add_raw_input_contents()->swap(*wire.mutable_data());
}

inference::ModelInferRequest OipHeadRequest(const FixtureCase& c, const HeadRequest& h,
                                            const TensorMap& tensors) {
  const nlohmann::json& o = h.options;
  inference::ModelInferRequest r;
  r.set_model_name(c.name);
  for (const char* name : {"query", "key", "value", "key_padding_mask", "attn_mask"}) {
    const ForwardInputs& in = c.inputs;
    const std::map<std::string, at::Tensor> all = {{"query", in.query},
                                                   {"key", in.key},
                                                   {"value", in.value},
                                                   {"key_padding_mask", in.key_padding_mask},
                                                   {"attn_mask", in.attn_mask}};
    AddInput(name, all.at(name), &r);
  }
  if (o.contains("head_mask")) {
    AddInput("head_mask", tensors.at(o["head_mask"].get<std::string>()), &r);
  }
  auto& p = *r.mutable_parameters();
  p["is_causal"].set_bool_param(c.inputs.is_causal);
  for (const char* flag : {"need_weights", "average_attn_weights", "head_stats"}) {
    if (o.contains(flag)) p[flag].set_bool_param(o[flag].get<bool>());
  }
  for (const char* number : {"weights_query_begin", "weights_query_end", "weights_top_k"}) {
    if (o.contains(number)) p[number].set_int64_param(o[number].get<int64_t>());
  }
  std::string heads;
  for (const auto& head : o.value("weights_heads", std::vector<int64_t>{})) {
    heads += (heads.empty() ? "" : ",") + std::to_string(head);
  }
  if (!heads.empty()) p["weights_heads"].set_string_param(heads);
  if (o.contains("weights_dtype")) p["weights_dtype"].set_string_param("FP16");
  if (o.contains("weights_topk_indices_dtype")) {
    p["weights_topk_indices_dtype"].set_string_param(
        o["weights_topk_indices_dtype"].get<std::string>());
  }
  return r;
}

// The OIP answer's outputs as the mha.v1 response fields of the same names.
v1::ForwardResponse AsForwardResponse(const inference::ModelInferResponse& r) {
  v1::ForwardResponse out;
  const std::map<std::string, v1::DataType> dtypes = {
      {"FP32", v1::FLOAT32}, {"FP16", v1::FLOAT16}, {"INT32", v1::INT32}, {"INT64", v1::INT64}};
  const auto* descriptor = out.GetDescriptor();
  for (int i = 0; i < r.outputs_size(); ++i) {
    const auto* field = descriptor->FindFieldByName(r.outputs(i).name());
    EXPECT_NE(field, nullptr) << r.outputs(i).name();
    if (field == nullptr || i >= r.raw_output_contents_size()) continue;
    auto* t = static_cast<v1::Tensor*>(out.GetReflection()->MutableMessage(&out, field));
    t->set_dtype(dtypes.at(r.outputs(i).datatype()));
    t->mutable_shape()->CopyFrom(r.outputs(i).shape());
    t->set_data(r.raw_output_contents(i));
  }
  return out;
}

class OipHeads : public SharedServerTest<OipHeads> {
 public:
  static SharedServerSpec Spec() {
    return {{"self_basic", "cross_attention", "bias_kv_zero_attn_kpm", "causal_kpm"},
            "",
            {"--default-model", "self_basic"}};
  }

 protected:
  void SetUp() override {
    ASSERT_TRUE(shared_->error.empty()) << shared_->error;
    stub_ = inference::GRPCInferenceService::NewStub(
        grpc::CreateChannel(shared_->server->target(), grpc::InsecureChannelCredentials()));
  }
  grpc::Status Infer(const inference::ModelInferRequest& r, inference::ModelInferResponse* out) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return stub_->ModelInfer(&context, r, out);
  }
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

class OipHeadParity : public OipHeads, public ::testing::WithParamInterface<HeadRequest> {};

TEST_P(OipHeadParity, MatchesPyTorchReference) {
  const HeadRequest& h = GetParam();
  auto c = LoadFixtureCase(h.case_name);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const TensorMap tensors = HeadTensors(h.case_name);
  inference::ModelInferResponse response;
  const grpc::Status s = Infer(OipHeadRequest(*c, h, tensors), &response);
  ASSERT_TRUE(s.ok()) << h.id << ": " << s.error_message();
  ExpectMatchesHeadRequest(AsForwardResponse(response), *c, h, tensors);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OipHeadParity, ::testing::ValuesIn(HeadRequests()),
                         [](const auto& info) {
                           return info.param.case_name + "_" + info.param.id;
                         });

TEST_F(OipHeads, BadParametersAndContradictoryOutputsAreInvalidArgument) {
  auto c = LoadFixtureCase("self_basic");
  ASSERT_TRUE(c.ok());
  const HeadRequest plain{"self_basic", "plain", {{"need_weights", true}}, {}};
  using Edit = std::function<void(inference::ModelInferRequest*)>;
  const std::vector<std::pair<Edit, std::string>> table = {
      {[](auto* r) { (*r->mutable_parameters())["weights_heads"].set_string_param("1,x"); },
       "parameters.weights_heads: '1,x' is not a comma-separated list"},
      {[](auto* r) { (*r->mutable_parameters())["weights_heads"].set_string_param("7"); },
       "weights_heads: head 7 (element 0) is out of range [0, 4)"},
      {[](auto* r) { (*r->mutable_parameters())["weights_top_k"].set_bool_param(true); },
       "parameters.weights_top_k: must be an int64_param"},
      {[](auto* r) { (*r->mutable_parameters())["weights_top_k"].set_int64_param(6); },
       "weights_top_k: 6 must be in [1, S'=5]"},
      {[](auto* r) { (*r->mutable_parameters())["weights_dtype"].set_string_param("INT8"); },
       "parameters.weights_dtype: must be a string_param, one of FP32, FP16, BF16"},
      {[](auto* r) {
         (*r->mutable_parameters())["weights_top_k"].set_int64_param(2);
         r->add_outputs()->set_name("attn_weights");
       },
       "outputs: attn_weights requested but parameters.weights_top_k"},
      {[](auto* r) { r->add_outputs()->set_name("attn_weights_topk_indices"); },
       "need parameters.weights_top_k >= 1"},
      {[](auto* r) {
         (*r->mutable_parameters())["head_stats"].set_bool_param(false);
         r->add_outputs()->set_name("head_entropy");
       },
       "outputs: head statistics requested but parameters.head_stats is false"},
  };
  for (const auto& [edit, part] : table) {
    inference::ModelInferRequest r = OipHeadRequest(*c, plain, {});
    edit(&r);
    inference::ModelInferResponse response;
    const grpc::Status s = Infer(r, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << part;
    EXPECT_TRUE(Contains(s.error_message(), part));
  }
  // Listing head_entropy alone asks for the statistics: exactly that output comes back.
  inference::ModelInferRequest r = OipHeadRequest(*c, plain, {});
  r.add_outputs()->set_name("head_entropy");
  inference::ModelInferResponse response;
  ASSERT_TRUE(Infer(r, &response).ok());
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).datatype(), "FP32");
  EXPECT_EQ(
      std::vector<int64_t>(response.outputs(0).shape().begin(), response.outputs(0).shape().end()),
      (std::vector<int64_t>{2, 4, 5}));
}

}  // namespace oip_heads_test
}  // namespace mha::testing
