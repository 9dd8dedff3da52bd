// The mha.v1 gRPC front end in-process against a fake serving core: the handlers and the stream
// reactor only translate (wire <-> InferenceRequest/InferenceResponse, mha::Status <-> gRPC
// codes), never validate shapes or schedule. No model, no CPU-speed dependence: the fake answers
// when the test tells it to.
#include <ATen/ATen.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <future>
#include <mutex>

#include "client/tensor_client.h"
#include "cq_test_server.h"
#include "fake_core.h"
#include "mha/tensor_adapter.h"
#include "proto/wire/tensor_codec.h"
#include "server/frontends/grpc_v1/attention_service.h"
#include "wait.h"
#include "wire_tensors.h"

namespace mha::serve {
namespace grpc_frontend_test {

using namespace std::chrono_literals;
using mha::testing::WireFloat;

class GrpcFrontendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    service_ =
        std::make_unique<AttentionServiceImpl>(&core_, &queue_, GrpcFrontendOptions{1 << 20, 4});
    served_ = std::make_unique<testing::CqTestServer>(
        &queue_, std::initializer_list<grpc::Service*>{service_.get()});
    ASSERT_TRUE(served_->listening());
    client_ = std::make_unique<client::TensorClient>(client::ClientOptions{served_->target(), 30s});
  }
  void TearDown() override { served_.reset(); }

  static v1::ForwardRequest Marked(float marker) {
    v1::ForwardRequest r;
    *r.mutable_query() = WireFloat({1, 2, 4}, marker);
    return r;
  }

  FakeCore core_;
  std::unique_ptr<AttentionServiceImpl> service_;
  CqQueue queue_{CqQueue::Options{2}};  // destroyed after the server, before the service
  std::unique_ptr<testing::CqTestServer> served_;
  std::unique_ptr<client::TensorClient> client_;
};

TEST_F(GrpcFrontendTest, ForwardTranslatesTheRequestAndTheAnswer) {
  ForwardInputs in;
  in.query = at::full({2, 3, 4}, 1.5f);
  in.is_causal = true;
  in.need_weights = true;
  client::ForwardOptions options;
  options.model = "wanted";
  options.average_attn_weights = false;
  options.output_dtype = v1::FLOAT16;
  options.request_id = "abc";
  auto result = client_->Forward(in, options);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const InferenceRequest seen = core_.Last();
  EXPECT_EQ(seen.model, "wanted");
  EXPECT_TRUE(ToTensor(seen.inputs.query).equal(in.query));
  EXPECT_TRUE(seen.inputs.is_causal);
  EXPECT_TRUE(seen.inputs.need_weights);
  EXPECT_FALSE(seen.inputs.average_attn_weights);
  EXPECT_EQ(seen.output_dtype, DType::kFloat16);
  EXPECT_EQ(seen.request_id, "abc");
  EXPECT_LT(seen.deadline, Clock::time_point::max());
  EXPECT_EQ(result->output.scalar_type(), at::kHalf);
  EXPECT_TRUE(result->output.to(at::kFloat).equal(at::full({2, 3, 4}, 3.0f)));
  EXPECT_EQ(result->attn_weights.sizes(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(result->model, "m");
  EXPECT_EQ(result->model_version, "7");
  EXPECT_EQ(result->queue_us, 11);
  EXPECT_EQ(result->compute_us, 22);
  EXPECT_EQ(result->request_id, "abc");
}

TEST_F(GrpcFrontendTest, ForwardLetsTheCoreRunThePassOnItsThreadWhenAnotherIsFree) {
  // Both Forward threads wait for calls: the one that takes this call may compute its pass.
  ASSERT_TRUE(
      testing::WaitUntil([&] { return queue_.idle_threads() == 2; }, "both Forward threads idle"));
  ASSERT_TRUE(client_->ForwardRaw(Marked(1.0f)).ok());
  EXPECT_TRUE(core_.Last().caller.may_run_pass());
}

TEST_F(GrpcFrontendTest, CoreStatusesBecomeTheSameGrpcCodes) {
  auto response = client_->ForwardRaw(Marked(-1.0f));
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(response.status().message().find("is negative"), std::string::npos);
}

TEST_F(GrpcFrontendTest, UndecodableRequestsNeverReachTheCore) {
  v1::ForwardRequest bad = Marked(1.0f);
  bad.mutable_query()->mutable_data()->resize(5);  // shape says 32 bytes
  auto response = client_->ForwardRaw(bad);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(core_.InferCalls(), 0);
  ASSERT_EQ(core_.Refused().size(), 1u);
  EXPECT_EQ(core_.Refused()[0].code(), StatusCode::kInvalidArgument);
}

TEST_F(GrpcFrontendTest, StreamAnswersInRequestOrderWhateverOrderTheCoreAnswersIn) {
  std::vector<v1::ForwardRequest> requests;
  for (int i = 0; i < 8; ++i) requests.push_back(Marked(static_cast<float>(i)));
  std::vector<v1::ForwardResponse> responses;
  std::future<Status> stream;
  // After `stream`: destroyed first, it answers what is still held if an assertion ends the test.
  const auto hold = core_.Hold();
  stream = std::async(std::launch::async,
                      [&] { return client_->ForwardStreamRaw(requests, &responses); });
  ASSERT_TRUE(core_.AnswerHeldInReverse(4));  // the stream window: 4 in flight at most
  ASSERT_TRUE(core_.AnswerHeldInReverse(4));
  const Status status = testing::GetWithin(stream, "the stream's status");
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(responses.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    auto output = codec::DecodeTensor(responses[i].output(), "output");
    ASSERT_TRUE(output.ok());
    EXPECT_FLOAT_EQ(ToTensor(*output).flatten()[0].item<float>(), 2.0f * i) << "answer " << i;
  }
}

TEST_F(GrpcFrontendTest, StreamEndsWithTheFirstFailingMessageAfterTheAnswersBeforeIt) {
  std::vector<v1::ForwardRequest> requests{Marked(0), Marked(1), Marked(-1), Marked(3)};
  std::vector<v1::ForwardResponse> responses;
  const Status status = client_->ForwardStreamRaw(requests, &responses);
  EXPECT_EQ(status.code(), StatusCode::kOutOfRange);
  EXPECT_NE(status.message().find("message 2: "), std::string::npos) << status.message();
  EXPECT_EQ(responses.size(), 2u);
}

}  // namespace grpc_frontend_test
}  // namespace mha::serve
