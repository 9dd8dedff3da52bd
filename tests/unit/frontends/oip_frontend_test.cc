// The Open Inference Protocol front end in-process against the fake serving core (fake_core.h):
// ModelInfer translates both ways and tags the request with its protocol and version;
// ModelStreamInfer is pipelined (several requests in the core at once) and answers in request
// order whatever order the core answers in; the client's --protocol oip path (oip_translate)
// round-trips a ForwardRequest. No model, no CPU-speed dependence.
#include <ATen/ATen.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstring>

#include "client/tensor_client.h"
#include "cq_test_server.h"
#include "fake_core.h"
#include "server/frontends/oip/inference_service.h"
#include "wire_tensors.h"

namespace mha::serve {
namespace oip_frontend_test {

using namespace std::chrono_literals;

inference::ModelInferRequest Marked(float marker, const std::string& id) {
  inference::ModelInferRequest r;
  r.set_model_name("m");
  r.set_id(id);
  auto* input = r.add_inputs();
  input->set_name("query");
  input->set_datatype("FP32");
  for (int64_t d : {1, 2, 4}) input->add_shape(d);
  const std::vector<float> values(8, marker);
  r.add_raw_input_contents()->assign(reinterpret_cast<const char*>(values.data()),
                                     values.size() * sizeof(float));
  return r;
}

float FirstOutput(const inference::ModelInferResponse& r) {
  if (r.raw_output_contents_size() == 0 || r.raw_output_contents(0).size() < sizeof(float)) {
    return -1e9f;
  }
  float value = 0;
  std::memcpy(&value, r.raw_output_contents(0).data(), sizeof(float));
  return value;
}

class OipFrontendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    oip::OipFrontendOptions options;
    options.max_message_bytes = 1 << 20;
    options.stream_window = 4;
    service_ = std::make_unique<oip::GrpcInferenceServiceImpl>(&core_, &queue_, options);
    served_ = std::make_unique<testing::CqTestServer>(
        &queue_, std::initializer_list<grpc::Service*>{service_.get()});
    ASSERT_TRUE(served_->listening());
    target_ = served_->target();
    stub_ = inference::GRPCInferenceService::NewStub(served_->Channel());
  }
  void TearDown() override { served_.reset(); }

  FakeCore core_;
  std::unique_ptr<oip::GrpcInferenceServiceImpl> service_;
  CqQueue queue_{CqQueue::Options{2}};  // destroyed after the server, before the service
  std::unique_ptr<testing::CqTestServer> served_;
  std::string target_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

TEST_F(OipFrontendTest, ModelInferCarriesTheProtocolAndTheRequestedVersion) {
  inference::ModelInferRequest request = Marked(1.5f, "x");
  request.set_model_version("3");
  grpc::ClientContext context;
  inference::ModelInferResponse response;
  const grpc::Status s = stub_->ModelInfer(&context, request, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(core_.Last().protocol, Protocol::kOip);
  EXPECT_EQ(core_.Last().model, "m");
  EXPECT_EQ(core_.Last().model_version, "3");
  EXPECT_EQ(response.id(), "x");
  EXPECT_EQ(response.model_version(), "7");  // what the core says answered
  EXPECT_FLOAT_EQ(FirstOutput(response), 3.0f);
}

TEST_F(OipFrontendTest, StreamRunsSeveralRequestsAtOnceAndAnswersInRequestOrder) {
  grpc::ClientContext context;
  auto stream = stub_->ModelStreamInfer(&context);
  // After `stream`: destroyed first, it answers what is still held if an assertion ends the test.
  const auto hold = core_.Hold();
  const float markers[] = {1, -1, 3};  // the second fails in the core
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(stream->Write(Marked(markers[i], "r" + std::to_string(i))));
  }
  // All three are in the core before any is answered (a window of 4), and the core answers the
  // last first: the stream still answers r0, r1, r2.
  ASSERT_TRUE(core_.AnswerHeldInReverse(3));
  stream->WritesDone();
  inference::ModelStreamInferResponse answer;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(stream->Read(&answer)) << i;
    EXPECT_EQ(answer.infer_response().id(), "r" + std::to_string(i));
    if (markers[i] < 0) {
      EXPECT_EQ(answer.error_message(), "OUT_OF_RANGE: marker -1.000000 is negative");
    } else {
      EXPECT_EQ(answer.error_message(), "");
      EXPECT_FLOAT_EQ(FirstOutput(answer.infer_response()), 2 * markers[i]);
    }
  }
  EXPECT_FALSE(stream->Read(&answer));
  const grpc::Status s = stream->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(OipFrontendTest, StreamAnswersAnUndecodableRequestInItsPlace) {
  grpc::ClientContext context;
  auto stream = stub_->ModelStreamInfer(&context);
  inference::ModelInferRequest bad = Marked(2, "bad");
  bad.mutable_inputs(0)->set_datatype("INT8");
  ASSERT_TRUE(stream->Write(Marked(1, "a")));
  ASSERT_TRUE(stream->Write(bad));
  ASSERT_TRUE(stream->Write(Marked(2, "b")));
  stream->WritesDone();
  inference::ModelStreamInferResponse answer;
  std::vector<std::string> ids, errors;
  while (stream->Read(&answer)) {
    ids.push_back(answer.infer_response().id());
    errors.push_back(answer.error_message());
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "bad", "b"}));
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1].rfind("INVALID_ARGUMENT: query: datatype 'INT8'", 0), 0u) << errors[1];
  EXPECT_EQ(errors[2], "");
  EXPECT_TRUE(stream->Finish().ok());
  ASSERT_EQ(core_.Refused().size(), 1u);  // counted once, by the front end
}

TEST_F(OipFrontendTest, TheClientsOipProtocolRoundTripsAForwardRequest) {
  client::ClientOptions options{target_, 30s};
  options.protocol = client::WireProtocol::kOip;
  client::TensorClient client(options);
  v1::ForwardRequest request;
  request.set_model("m");
  request.set_model_version("5");
  request.set_is_causal(true);
  *request.mutable_query() = mha::testing::WireFloat({1, 2, 4}, 0.25f);
  auto response = client.ForwardRaw(request);
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(core_.Last().protocol, Protocol::kOip);
  EXPECT_EQ(core_.Last().model_version, "5");
  EXPECT_TRUE(core_.Last().inputs.is_causal);
  EXPECT_EQ(response->model(), "m");
  EXPECT_EQ(response->model_version(), "7");
  EXPECT_EQ(response->queue_us(), 11);
  EXPECT_EQ(response->compute_us(), 22);
  ASSERT_EQ(response->output().dtype(), v1::FLOAT32);
  ASSERT_EQ(response->output().shape_size(), 3);
  float first = 0;
  std::memcpy(&first, response->output().data().data(), sizeof(float));
  EXPECT_FLOAT_EQ(first, 0.5f);

  request.set_output_dtype(v1::FLOAT16);  // the protocol has no place for it
  auto refused = client.ForwardRaw(request);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("output_dtype"), std::string::npos);

  // Options the protocol cannot carry are refused by the client, never silently dropped.
  request.clear_output_dtype();
  request.set_weights_top_k(2);
  auto heads = client.ForwardRaw(request);
  EXPECT_EQ(heads.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(heads.status().message().find("head options"), std::string::npos);
  request.clear_weights_top_k();
  request.set_session_id("s-1");
  auto session = client.ForwardRaw(request);
  EXPECT_EQ(session.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(session.status().message().find("session_id: decoding sessions are an mha.v1"),
            std::string::npos);
  EXPECT_EQ(core_.Last().inputs.weights_selection.top_k, 0);  // neither reached the server
}

}  // namespace oip_frontend_test
}  // namespace mha::serve
