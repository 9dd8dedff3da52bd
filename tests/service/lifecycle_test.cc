// Server life cycle: health NOT_SERVING -> SERVING (loading held), a full queue and SIGTERM during
// a burst (passes held; both at mha-test-server's gate, hold_gate.h), the built-in default model,
// a repository without a default model, server reflection.
#include <ATen/ATen.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "hold_gate.h"
#include "service_test_util.h"

namespace mha::testing {
namespace lifecycle_test {

using HealthStatus = grpc::health::v1::HealthCheckResponse;

// Fires `count` Forward calls at once (async) and collects every status.
class Burst {
 public:
  Burst(client::TensorClient& client, const v1::ForwardRequest& request, int count)
      : request_(request), responses_(count) {
    for (int i = 0; i < count; ++i) contexts_.push_back(std::make_unique<grpc::ClientContext>());
    for (int i = 0; i < count; ++i) {
      client.ForwardAsync(contexts_[i].get(), &request_, &responses_[i], std::chrono::seconds(120),
                          [this](grpc::Status s) {
                            std::lock_guard<std::mutex> lock(mu_);
                            statuses_.push_back(s);
                            cv_.notify_all();
                          });
    }
  }
  ~Burst() { WaitFor(responses_.size(), std::chrono::seconds(300)); }  // callbacks use `this`
  // Waits until `n` calls have completed (true) or `timeout` passed (false).
  bool WaitFor(size_t n, std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return statuses_.size() >= n; });
  }
  std::vector<grpc::Status> statuses() {
    std::lock_guard<std::mutex> lock(mu_);
    return statuses_;
  }
  size_t size() const { return responses_.size(); }

 private:
  const v1::ForwardRequest request_;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts_;
  std::vector<v1::ForwardResponse> responses_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<grpc::Status> statuses_;
};

bool TcpPortAcceptsConnections(int port) {
  const int fd = ConnectLoopback(port);
  if (fd >= 0) close(fd);
  return fd >= 0;
}

// Loading is held at the gate until the NOT_SERVING answers are checked (however slow the machine).
TEST(ServiceLifecycle, HealthIsNotServingUntilModelsAreLoaded) {
  ModelRepositoryDir repository({"self_basic"});
  ServerProcess server;
  HoldGate gate;
  gate.Attach(&server);
  gate.HoldLoads();
  const int port = ServerProcess::PickFreePort();
  ASSERT_GT(port, 0);
  ASSERT_TRUE(server.Start(gate.Args({"--model-repository", repository.path(), "--grpc-address",
                                      "127.0.0.1:" + std::to_string(port)}),
                           /*wait_until_serving=*/false));
  // Wait for the listening socket with plain TCP connects (a gRPC channel that failed to connect
  // backs off for seconds), then ask: the first answer must be NOT_SERVING.
  ASSERT_TRUE(WaitUntil([&] { return TcpPortAcceptsConnections(port) || !server.running(); },
                        "the gRPC port to accept connections"));
  ASSERT_TRUE(server.running()) << server.log();
  client::TensorClient client({"127.0.0.1:" + std::to_string(port), std::chrono::seconds(5)});
  auto first = client.CheckHealth("");
  ASSERT_TRUE(first.ok()) << first.status().ToString() << "\n" << server.log();
  EXPECT_EQ(*first, HealthStatus::NOT_SERVING);
  auto per_service = client.CheckHealth("mha.v1.AttentionService");
  ASSERT_TRUE(per_service.ok()) << per_service.status().ToString();
  EXPECT_EQ(*per_service, HealthStatus::NOT_SERVING);
  auto early = client.ForwardRaw(SelfAttentionRequest("", 1, 2, 16));
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.status().code(), StatusCode::kUnavailable) << early.status().ToString();
  EXPECT_NE(early.status().message().find("loading"), std::string::npos);
  auto still = client.CheckHealth("");
  ASSERT_TRUE(still.ok()) << still.status().ToString();
  EXPECT_EQ(*still, HealthStatus::NOT_SERVING);

  gate.ReleaseLoads();
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto now = client.CheckHealth("");
        return now.ok() && *now == HealthStatus::SERVING;
      },
      "health SERVING", std::chrono::seconds(120), std::chrono::milliseconds(20)))
      << server.log();
  per_service = client.CheckHealth("mha.v1.AttentionService");
  ASSERT_TRUE(per_service.ok());
  EXPECT_EQ(*per_service, HealthStatus::SERVING);
  auto answer = client.ForwardRaw(SelfAttentionRequest("", 1, 2, 16));
  EXPECT_TRUE(answer.ok()) << answer.status().ToString();
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

// Batching off, one worker, a queue of 1: with the first pass held at the gate (no assumption on
// how long a pass takes), one more request waits in the queue and the next is refused at once.
// (The batcher's own queue-full path is tested with a fake model in dynamic_batcher_test.cc.)
TEST(ServiceLifecycle, FullQueueIsResourceExhaustedAndTheServerRecovers) {
  ServerProcess server;
  HoldGate gate;
  gate.Attach(&server);
  ASSERT_TRUE(
      server.Start(gate.Args({"--batching", "off", "--workers", "1", "--max-queue-size", "1"})));
  client::TensorClient client({server.target(), std::chrono::seconds(120)});
  const v1::ForwardRequest request = SelfAttentionRequest("", 1, 4, 512);
  gate.Hold();
  Burst running(client, request, 1);
  const ReleaseOnExit release_running(gate);
  ASSERT_TRUE(gate.WaitEntered(1));  // the only worker is busy with it
  Burst more(client, request, 2);    // one waits in the queue of 1, the other is refused
  const ReleaseOnExit release_more(gate);
  ASSERT_TRUE(more.WaitFor(1, std::chrono::seconds(120))) << "neither was refused";
  const grpc::Status refused = more.statuses()[0];
  EXPECT_EQ(refused.error_code(), grpc::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_NE(refused.error_message().find("queue full"), std::string::npos);
  EXPECT_NE(refused.error_message().find("--max-queue-size 1"), std::string::npos);
  EXPECT_TRUE(running.statuses().empty()) << "the held pass answered";
  gate.ReleaseAll();
  ASSERT_TRUE(running.WaitFor(1, std::chrono::seconds(300)));
  ASSERT_TRUE(more.WaitFor(2, std::chrono::seconds(300)));
  EXPECT_TRUE(running.statuses()[0].ok()) << running.statuses()[0].error_message();
  EXPECT_TRUE(more.statuses()[1].ok()) << more.statuses()[1].error_message();
  auto after = client.ForwardRaw(SelfAttentionRequest("", 1, 4, 512));
  EXPECT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

// SIGTERM lands while a pass is held at the gate and the other calls wait behind it (whatever
// the machine's speed): every call is answered, the server exits 0.
TEST(ServiceLifecycle, SigtermDuringABurstAnswersEveryCallAndExitsZero) {
  ServerProcess server;
  HoldGate gate;
  gate.Attach(&server);
  ASSERT_TRUE(server.Start(
      gate.Args({"--workers", "1", "--max-queue-size", "64", "--grace-period-s", "120"})));
  client::TensorClient client({server.target(), std::chrono::seconds(120)});
  gate.Hold();
  Burst burst(client, SelfAttentionRequest("", 8, 128, 512), 16);
  const ReleaseOnExit release(gate);
  ASSERT_TRUE(gate.WaitEntered(1));  // a pass is running; the others are queued or on their way
  server.Signal(SIGTERM);
  ASSERT_TRUE(WaitForLog(server, "NOT_SERVING, finishing in-flight calls"));
  gate.ReleaseAll();
  ASSERT_TRUE(burst.WaitFor(burst.size(), std::chrono::seconds(300)))
      << "some calls never got an answer";
  int ok = 0;
  for (const auto& s : burst.statuses()) {
    if (s.ok()) {
      ++ok;
    } else {  // only calls that had not reached a handler may be refused: UNAVAILABLE, or
              // CANCELLED when the stopping transport reset the call before a handler took it
              // (the same two codes the client's retry policy retries, client/channel.h)
      EXPECT_TRUE(s.error_code() == grpc::UNAVAILABLE || s.error_code() == grpc::CANCELLED)
          << s.error_code() << " " << s.error_message();
    }
  }
  EXPECT_GE(ok, 1);
  EXPECT_EQ(server.WaitForExit(std::chrono::seconds(120)), 0) << server.log();
  EXPECT_NE(server.log().find("NOT_SERVING, finishing in-flight calls"), std::string::npos);
}

TEST(ServiceLifecycle, BuiltInDefaultModelIsDeterministicAcrossRuns) {
  at::Tensor outputs[2];
  for (int run = 0; run < 2; ++run) {
    ServerProcess server;
    ASSERT_TRUE(server.Start({}));
    client::TensorClient client({server.target(), std::chrono::seconds(60)});
    auto info = client.GetModel("");
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->name(), "default");
    EXPECT_EQ(info->embed_dim(), 512);
    EXPECT_EQ(info->num_heads(), 8);
    EXPECT_EQ(info->format(), "builtin");
    ForwardInputs in;
    in.query = at::linspace(-1, 1, 2 * 3 * 512).reshape({2, 3, 512});
    auto result = client.Forward(in);
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    EXPECT_TRUE(at::isfinite(result->output).all().item<bool>());
    EXPECT_GT(result->output.abs().max().item<float>(), 0.f);
    outputs[run] = result->output;
    EXPECT_EQ(server.Stop(), 0) << server.log();
  }
  EXPECT_TRUE(at::equal(outputs[0], outputs[1]));
}

TEST(ServiceLifecycle, SeveralModelsWithoutDefaultNeedANameInEachRequest) {
  ModelRepositoryDir repository({"self_basic", "causal"});
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--model-repository", repository.path()}));
  client::TensorClient client({server.target(), std::chrono::seconds(60)});
  auto models = client.ListModels();
  ASSERT_TRUE(models.ok());
  EXPECT_EQ(models->default_model(), "");
  auto unnamed = client.ForwardRaw(SelfAttentionRequest("", 1, 2, 16));
  ASSERT_FALSE(unnamed.ok());
  EXPECT_EQ(unnamed.status().code(), StatusCode::kNotFound);
  for (const char* part : {"no default model", "self_basic", "causal", "--default-model"}) {
    EXPECT_NE(unnamed.status().message().find(part), std::string::npos)
        << unnamed.status().message();
  }
  EXPECT_TRUE(client.ForwardRaw(SelfAttentionRequest("causal", 1, 2, 16)).ok());
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

// Raw grpc.reflection.v1alpha call (no generated stubs): list_services.
TEST(ServiceLifecycle, ServerReflectionListsTheAttentionService) {
  ServerProcess server;
  ASSERT_TRUE(server.Start({}));
  auto channel = grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::CompletionQueue cq;
  auto next = [&cq] {
    void* tag = nullptr;
    bool ok = false;
    return cq.Next(&tag, &ok) && ok;
  };
  auto call = stub.PrepareCall(
      &context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(next());
  const char request_bytes[] = {0x3a, 0x00};  // ServerReflectionRequest{list_services: ""}
  grpc::Slice slice(request_bytes, sizeof(request_bytes));
  grpc::ByteBuffer request(&slice, 1);
  call->Write(request, reinterpret_cast<void*>(2));
  ASSERT_TRUE(next());
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(3));
  ASSERT_TRUE(next());
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_NE(bytes.find("mha.v1.AttentionService"), std::string::npos);
  call->WritesDone(reinterpret_cast<void*>(4));
  next();
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  next();
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

}  // namespace lifecycle_test
}  // namespace mha::testing
