// Every error code of the API, each checked for its code and its message, and each followed by a
// good request that must still be answered (a bad request never takes the server down).
#include <gtest/gtest.h>

#include "service_test_util.h"

namespace mha::testing {
namespace errors_test {

constexpr int64_t kE = 16;  // self_basic: E=16, H=4

class ErrorServer : public SharedServerTest<ErrorServer> {
 public:
  static SharedServerSpec Spec() {
    return {{"self_basic", "kdim_vdim"},
            "wrong_shape",
            {"--default-model", "self_basic", "--max-batch-size", "4", "--max-sequence-length",
             "32", "--max-message-bytes", "65536"}};
  }

 protected:
  void TearDown() override {
    // Whatever the test sent, the server still answers a good request.
    auto response = client_->ForwardRaw(SelfAttentionRequest("self_basic", 2, 5, kE));
    EXPECT_TRUE(response.ok()) << "server no longer answers: " << response.status().ToString();
  }

  // Sends `request`, expects `code` and every `parts` in the message.
  void ExpectError(const v1::ForwardRequest& request, StatusCode code,
                   const std::vector<std::string>& parts,
                   std::optional<std::chrono::milliseconds> timeout = {}) {
    auto response = client_->ForwardRaw(request, timeout);
    ASSERT_FALSE(response.ok()) << "expected " << StatusCodeName(code) << ", got an answer";
    EXPECT_EQ(response.status().code(), code) << response.status().ToString();
    for (const auto& part : parts) {
      EXPECT_NE(response.status().message().find(part), std::string::npos)
          << "message lacks '" << part << "': " << response.status().message();
    }
  }
};

TEST_F(ErrorServer, ByteCountDifferentFromShapeTimesDtypeSize) {
  v1::ForwardRequest r = SelfAttentionRequest("self_basic", 2, 5, kE);
  *r.mutable_query() = WireFloat({2, 5, 16}, 0.5f, 100);
  ExpectError(r, StatusCode::kInvalidArgument,
              {"query: data has 100 bytes, shape [2, 5, 16] float32 needs 640"});
}

TEST_F(ErrorServer, WrongRank) {
  v1::ForwardRequest r;
  *r.mutable_query() = WireFloat({5, kE});
  ExpectError(r, StatusCode::kInvalidArgument, {"query", "rank 3", "[5, 16]"});
}

TEST_F(ErrorServer, EmbeddingDimensionMismatch) {
  ExpectError(SelfAttentionRequest("self_basic", 2, 5, 8), StatusCode::kInvalidArgument,
              {"query", "16", "8"});
}

TEST_F(ErrorServer, ZeroAndNegativeDimensions) {
  v1::ForwardRequest r;
  *r.mutable_query() = WireFloat({2, 0, kE});
  ExpectError(r, StatusCode::kInvalidArgument, {"query", "dimension 1", "> 0"});
  r.mutable_query()->set_shape(1, -3);
  ExpectError(r, StatusCode::kInvalidArgument, {"query", "-3"});
}

TEST_F(ErrorServer, ShapeWhoseElementCountOverflows) {
  v1::ForwardRequest r;
  *r.mutable_query() = WireFloat({1, 1, kE});
  r.mutable_query()->set_shape(0, int64_t{1} << 40);
  r.mutable_query()->set_shape(1, int64_t{1} << 40);
  ExpectError(r, StatusCode::kInvalidArgument, {"query", "64 bits"});
}

TEST_F(ErrorServer, UnsupportedDtypes) {
  v1::ForwardRequest r = SelfAttentionRequest("self_basic", 1, 3, kE);
  r.mutable_query()->set_dtype(v1::DATA_TYPE_UNSPECIFIED);
  ExpectError(r, StatusCode::kInvalidArgument, {"query", "DATA_TYPE_UNSPECIFIED"});
  r.mutable_query()->set_dtype(static_cast<v1::DataType>(42));
  ExpectError(r, StatusCode::kInvalidArgument, {"query", "dtype(42)"});
  r = SelfAttentionRequest("self_basic", 1, 3, kE);
  *r.mutable_query() = WireBool({1, 3, kE});
  ExpectError(r, StatusCode::kInvalidArgument, {"query", "bool"});
  r = SelfAttentionRequest("self_basic", 1, 3, kE);
  r.set_output_dtype(v1::BOOL);
  ExpectError(r, StatusCode::kInvalidArgument, {"output_dtype"});
}

TEST_F(ErrorServer, MissingQueryAndKeyWithoutValue) {
  v1::ForwardRequest r;
  ExpectError(r, StatusCode::kInvalidArgument, {"query: required"});
  r = SelfAttentionRequest("self_basic", 1, 3, kE);
  *r.mutable_key() = WireFloat({1, 4, kE});
  ExpectError(r, StatusCode::kInvalidArgument, {"value", "key"});
}

TEST_F(ErrorServer, MaskShapeAndContent) {
  v1::ForwardRequest r = SelfAttentionRequest("self_basic", 2, 5, kE);
  *r.mutable_key_padding_mask() = WireBool({2, 4});
  ExpectError(r, StatusCode::kInvalidArgument, {"key_padding_mask", "[2, 4]"});
  r = SelfAttentionRequest("self_basic", 2, 5, kE);
  *r.mutable_attn_mask() = WireFloat({5, 6});
  ExpectError(r, StatusCode::kInvalidArgument, {"attn_mask", "[5, 6]"});
  r = SelfAttentionRequest("self_basic", 2, 5, kE);
  *r.mutable_key_padding_mask() = WireBool({2, 5}, 2);  // BOOL bytes must be 0 or 1
  ExpectError(r, StatusCode::kInvalidArgument, {"key_padding_mask", "0 or 1"});
  r = SelfAttentionRequest("self_basic", 2, 5, kE);
  *r.mutable_attn_mask() = WireFloat({5, 5}, 0.f, 7);
  ExpectError(r, StatusCode::kInvalidArgument, {"attn_mask: data has 7 bytes"});
}

TEST_F(ErrorServer, CrossAttentionShapesOfAnotherModel) {
  v1::ForwardRequest r = SelfAttentionRequest("kdim_vdim", 1, 3, kE);  // needs key and value
  ExpectError(r, StatusCode::kInvalidArgument, {"key and value"});
  *r.mutable_key() = WireFloat({1, 4, 5});
  *r.mutable_value() = WireFloat({1, 4, 20});
  ExpectError(r, StatusCode::kInvalidArgument, {"key", "kdim"});
}

TEST_F(ErrorServer, UnknownModelIsNotFoundAndListsTheModels) {
  ExpectError(SelfAttentionRequest("no_such_model", 1, 3, kE), StatusCode::kNotFound,
              {"no_such_model", "self_basic", "kdim_vdim", "broken"});
  auto info = client_->GetModel("no_such_model");
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), StatusCode::kNotFound);
}

TEST_F(ErrorServer, FailedModelIsFailedPrecondition) {
  ExpectError(SelfAttentionRequest("broken", 1, 3, kE), StatusCode::kFailedPrecondition,
              {"broken", "failed to load", "out_proj.weight"});
}

TEST_F(ErrorServer, BatchAndSequenceLimits) {
  ExpectError(SelfAttentionRequest("self_basic", 5, 3, kE), StatusCode::kResourceExhausted,
              {"batch size 5", "--max-batch-size 4"});
  ExpectError(SelfAttentionRequest("self_basic", 1, 33, kE), StatusCode::kResourceExhausted,
              {"query", "sequence length 33", "--max-sequence-length 32"});
  v1::ForwardRequest r = SelfAttentionRequest("self_basic", 1, 3, kE);
  *r.mutable_key() = WireFloat({1, 40, kE});
  *r.mutable_value() = WireFloat({1, 40, kE});
  ExpectError(r, StatusCode::kResourceExhausted, {"key", "sequence length 40"});
}

TEST_F(ErrorServer, MessageSizeLimit) {
  v1::ForwardRequest r = SelfAttentionRequest("self_basic", 1, 3, kE);
  r.set_model(std::string(70000, 'm'));  // just over --max-message-bytes: answered precisely
  ExpectError(r, StatusCode::kResourceExhausted, {"over --max-message-bytes 65536"});
  r.set_model(std::string(3 << 20, 'm'));  // far over: gRPC's own receive limit refuses it
  auto response = client_->ForwardRaw(r);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), StatusCode::kResourceExhausted)
      << response.status().ToString();
}

// A 1 ms deadline on a request that cannot be answered in 1 ms on any machine: ~2.4 GFLOP
// (B=8, T=S=1024, E=64) and 2 MiB each way. (A tiny request can legitimately beat the deadline.)
class DeadlineServer : public SharedServerTest<DeadlineServer> {
 public:
  static SharedServerSpec Spec() { return {{"larger_e64"}, "", {"--default-model", "larger_e64"}}; }
};

TEST_F(DeadlineServer, RequestThatCannotFinishInTimeIsDeadlineExceeded) {
  ASSERT_TRUE(shared_->error.empty()) << shared_->error;
  auto client = shared_->Client();
  auto response = client->ForwardRaw(SelfAttentionRequest("larger_e64", 8, 1024, 64),
                                     std::chrono::milliseconds(1));
  ASSERT_FALSE(response.ok()) << "a 2.4 GFLOP pass answered within 1 ms";
  EXPECT_EQ(response.status().code(), StatusCode::kDeadlineExceeded)
      << response.status().ToString();
  // The server drops or finishes that pass and keeps answering.
  EXPECT_TRUE(client->ForwardRaw(SelfAttentionRequest("larger_e64", 1, 4, 64)).ok());
}

TEST_F(ErrorServer, BadMessageMidStreamEndsItWithItsIndex) {
  std::vector<v1::ForwardRequest> requests;
  for (int i = 0; i < 8; ++i) requests.push_back(SelfAttentionRequest("self_basic", 1, 2 + i, kE));
  *requests[5].mutable_query() = WireFloat({1, 3, kE}, 0.5f, 12);
  std::vector<v1::ForwardResponse> responses;
  const Status status = client_->ForwardStreamRaw(requests, &responses);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("message 5: query: data has 12 bytes"), std::string::npos)
      << status.message();
  ASSERT_EQ(responses.size(), 5u);  // the answers before the bad message, in order
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(codec::ShapeOf(responses[i].output()), (std::vector<int64_t>{1, 2 + i, kE}));
  }
}

TEST_F(ErrorServer, UnknownModelMidStreamIsNotFoundWithItsIndex) {
  std::vector<v1::ForwardRequest> requests = {
      SelfAttentionRequest("self_basic", 1, 2, kE), SelfAttentionRequest("self_basic", 1, 3, kE),
      SelfAttentionRequest("nope", 1, 3, kE), SelfAttentionRequest("self_basic", 1, 4, kE)};
  std::vector<v1::ForwardResponse> responses;
  const Status status = client_->ForwardStreamRaw(requests, &responses);
  EXPECT_EQ(status.code(), StatusCode::kNotFound) << status.ToString();
  EXPECT_EQ(status.message().rfind("message 2: ", 0), 0u) << status.message();
  EXPECT_EQ(responses.size(), 2u);
}

TEST_F(ErrorServer, ClientCancellingAStreamMidwayLeavesTheServerServing) {
  auto stub = v1::AttentionService::NewStub(client_->channel());
  grpc::ClientContext context;
  auto stream = stub->ForwardStream(&context);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(stream->Write(SelfAttentionRequest("", 2, 8, kE)));
  v1::ForwardResponse first;
  ASSERT_TRUE(stream->Read(&first));
  context.TryCancel();
  v1::ForwardResponse ignored;
  while (stream->Read(&ignored)) {
  }
  EXPECT_EQ(stream->Finish().error_code(), grpc::CANCELLED);
  // TearDown checks that a good request is still answered.
}

TEST_F(ErrorServer, EmptyStreamEndsOk) {
  std::vector<v1::ForwardResponse> responses;
  EXPECT_TRUE(client_->ForwardStreamRaw({}, &responses).ok());
  EXPECT_TRUE(responses.empty());
}

}  // namespace errors_test
}  // namespace mha::testing
