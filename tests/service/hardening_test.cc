// Hardening (docs/security.md): legal requests that would blow the response or the memory up are
// refused before any compute, slow HTTP clients cannot starve the health endpoint, the server exits
// within its grace period whatever runs, bad bytes get a precise code, echoed strings are capped,
// each answered request is counted once, no absolute path leaks, config.json is checked.
#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <thread>

#include "hold_gate.h"
#include "metrics_scrape.h"
#include "service_test_util.h"
#include "wait.h"

namespace mha::testing {
namespace hardening_test {

using namespace std::chrono_literals;

TEST(Hardening, ResponseOverTheBudgetIsRefusedBeforeComputeAndTheServerGoesOn) {
  ServerProcess server;  // the built-in model: E=512, H=8
  // Blocked attention (docs/core.md) needs little more than the averaged weights' own f32 sum
  // (8*4096*4096*4 bytes = 512 MiB) for the second request: a budget of 256 MiB refuses it.
  ASSERT_TRUE(server.Start({"--max-work-bytes", "268435456"}));
  client::TensorClient client({server.target(), 120s});
  // B=8, T=S=4096, per-head weights: 8*8*4096*4096 floats = 4 GiB, over protobuf's 2 GiB.
  v1::ForwardRequest big;
  *big.mutable_query() = WireBytes(v1::BFLOAT16, 2, {8, 4096, 512});
  big.set_need_weights(true);
  big.set_average_attn_weights(false);
  auto refused = client.ForwardRaw(big);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  for (const char* part : {"--max-response-bytes 1073741824", "averaged weights", "bytes"}) {
    EXPECT_NE(refused.status().message().find(part), std::string::npos)
        << part << " not in: " << refused.status().message();
  }
  // Averaged weights fit the response budget; the working memory does not.
  big.set_average_attn_weights(true);
  auto work = client.ForwardRaw(big);
  ASSERT_FALSE(work.ok());
  EXPECT_NE(work.status().message().find("--max-work-bytes"), std::string::npos)
      << work.status().message();
  auto after = client.ForwardRaw(SelfAttentionRequest("", 1, 4, 512));
  EXPECT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

// A client that sends half a request and then one byte now and then, never finishing it.
int SlowSocket(int port) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return -1;
  const char partial[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
  if (send(fd, partial, sizeof(partial) - 1, MSG_NOSIGNAL) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST(Hardening, SlowHttpClientsDoNotDelayTheHealthEndpoint) {
  ServerProcess server;
  const std::string port_file = server.work_dir() + "/metrics-port";
  ASSERT_TRUE(server.Start({"--metrics-port-file", port_file}));
  const int port = ReadPortFile(port_file);
  ASSERT_GT(port, 0);
  std::vector<int> slow;
  for (int i = 0; i < 16; ++i) slow.push_back(SlowSocket(port));
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    while (!stop) {
      for (int fd : slow) {
        if (fd >= 0) send(fd, "a", 1, MSG_NOSIGNAL);
      }
      std::this_thread::sleep_for(300ms);
    }
  });
  // Without enough threads the probes wait as long as the slow clients trickle (forever here);
  // the generous client timeout keeps a loaded machine from failing a healthy server.
  httplib::Client http("127.0.0.1", port);
  http.set_connection_timeout(5, 0);
  http.set_read_timeout(5, 0);
  for (int i = 0; i < 10; ++i) {
    auto res = http.Get("/healthz");
    if (!res) {  // not ASSERT: the trickle thread must still be joined below
      ADD_FAILURE() << "probe " << i << " got no answer with 16 slow clients holding connections";
      break;
    }
    EXPECT_EQ(res->status, 200);
    std::this_thread::sleep_for(100ms);
  }
  stop = true;
  trickle.join();
  for (int fd : slow) {
    if (fd >= 0) close(fd);
  }
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

TEST(Hardening, ShutdownEndsWithinTheGracePeriodWhileAPassIsRunning) {
  ServerProcess server;
  HoldGate gate;  // every pass is held until released: it is surely running when the signal comes
  gate.Attach(&server);
  ASSERT_TRUE(server.Start(gate.Args({"--grace-period-s", "0.3"})));
  gate.Hold();
  client::TensorClient client({server.target(), 60s});
  std::promise<Status> answer;
  std::thread call(
      [&] { answer.set_value(client.ForwardRaw(SelfAttentionRequest("", 1, 4, 512)).status()); });
  EXPECT_TRUE(gate.WaitEntered(1));  // the call is in the pass (held: it never ends on its own)
  const auto start = std::chrono::steady_clock::now();
  server.Signal(SIGTERM);
  const int code = server.WaitForExit(30s);
  const auto took = std::chrono::steady_clock::now() - start;
  call.join();
  EXPECT_EQ(code, 0) << server.log();
  // grace 0.3 s + 1 s, with room for a loaded machine; the held pass would never end.
  EXPECT_LT(took, 6s) << server.log();
  // The watchdog ended it (the held pass would never end), and said so.
  EXPECT_NE(server.log().find("still stopping 1300 ms after the signal"), std::string::npos)
      << server.log();
  const Status status = GetWithin(answer.get_future(), "the held call's answer");
  EXPECT_FALSE(status.ok());
}

TEST(Hardening, BytesThatAreNotAForwardRequestAreInvalidArgument) {
  ServerProcess server;
  ASSERT_TRUE(server.Start({}));
  auto channel = grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  const std::string garbage = "\xff\xff\xff\xff\x0f not protobuf";
  grpc::Slice slice(garbage);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 30s);
  auto done = std::make_shared<std::promise<grpc::Status>>();
  stub.UnaryCall(&context, "/mha.v1.AttentionService/Forward", grpc::StubOptions(), &request,
                 &response, [done](grpc::Status s) { done->set_value(s); });
  const grpc::Status status = GetWithin(done->get_future(), "the garbage call's status");
  EXPECT_EQ(status.error_code(), grpc::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("not a valid mha.v1.ForwardRequest"), std::string::npos)
      << status.error_message();
  client::TensorClient client({server.target(), 60s});
  EXPECT_TRUE(client.ForwardRaw(SelfAttentionRequest("", 1, 4, 512)).ok());
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

TEST(Hardening, EchoedNamesAreCapped) {
  ServerProcess server;
  ASSERT_TRUE(server.Start({}));
  client::TensorClient client({server.target(), 60s});
  const std::string huge(100000, 'm');
  auto forward = client.ForwardRaw(SelfAttentionRequest(huge, 1, 4, 512));
  ASSERT_FALSE(forward.ok());
  EXPECT_EQ(forward.status().code(), StatusCode::kNotFound);
  EXPECT_LT(forward.status().message().size(), 512u);
  EXPECT_NE(forward.status().message().find("(100000 bytes)"), std::string::npos);
  auto info = client.GetModel(huge);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), StatusCode::kNotFound);
  EXPECT_LT(info.status().message().size(), 512u);
  EXPECT_LT(server.log().size(), 64000u) << "the name went into the log whole";
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

TEST(Hardening, AStreamCountsOneOutcomePerAnsweredMessage) {
  ModelRepositoryDir repository({"self_basic"});
  ServerProcess server;
  const std::string port_file = server.work_dir() + "/metrics-port";
  ASSERT_TRUE(server.Start({"--model-repository", repository.path(), "--metrics-port-file",
                            port_file, "--stream-window", "8"}));
  const int port = ReadPortFile(port_file);
  client::TensorClient client({server.target(), 60s});
  std::vector<v1::ForwardRequest> requests;
  for (int i = 0; i < 8; ++i) {
    requests.push_back(SelfAttentionRequest(i == 2 ? "nope" : "self_basic", 1, 3, 16));
  }
  std::vector<v1::ForwardResponse> responses;
  const Status status = client.ForwardStreamRaw(requests, &responses);
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  ASSERT_EQ(responses.size(), 2u);
  // Two answers and the failure that ended the stream; the messages after it are not counted.
  EXPECT_EQ(ScrapeMetric(port, R"(mha_requests_total{code="OK",model="self_basic"})"), 2);
  EXPECT_EQ(ScrapeMetric(port, R"(mha_requests_total{code="NOT_FOUND",model="unknown"})"), 1);
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

// Messages already in flight when the stream ends (here: its deadline passes while they wait
// behind a held pass) are neither answered nor counted: the server counts what the client saw,
// the answers and the one failure. Before, each of them was counted (9 OK + 23
// DEADLINE_EXCEEDED for a client that saw 1 + 1). Passes wait at a hold gate; the stream's
// deadline is 5 s: messages 0 and 1 are let through and answered, message 2's pass is held until
// the deadline has passed.
TEST(Hardening, AStreamEndedByItsDeadlineCountsOnlyWhatTheClientSaw) {
  ModelRepositoryDir repository({"self_basic"});
  ServerProcess server;
  HoldGate gate;
  gate.Attach(&server);
  const std::string port_file = server.work_dir() + "/metrics-port";
  ASSERT_TRUE(server.Start(
      gate.Args({"--model-repository", repository.path(), "--metrics-port-file", port_file,
                 "--stream-window", "8", "--batching", "false", "--workers", "1"})));
  const int port = ReadPortFile(port_file);
  gate.Hold();
  client::TensorClient client({server.target(), 5s});
  std::vector<v1::ForwardRequest> requests;
  for (int i = 0; i < 8; ++i) requests.push_back(SelfAttentionRequest("self_basic", 1, 3, 16));
  std::vector<v1::ForwardResponse> responses;
  auto stream =
      std::async(std::launch::async, [&] { return client.ForwardStreamRaw(requests, &responses); });
  for (int pass = 1; pass <= 2; ++pass) {  // messages 0 and 1, one pass each
    EXPECT_TRUE(gate.WaitEntered(pass));
    gate.Release(pass);
  }
  EXPECT_TRUE(gate.WaitEntered(3));  // message 2: running when the deadline passes
  const Status status = GetWithin(stream, "the stream's status");
  // The server's deadline is the client's as sent, so it passes a little later there: message 2's
  // pass may go only once the server has seen it (its line), else its answer would be written.
  EXPECT_TRUE(WaitForLog(server, "ForwardStream cancelled request_id="));
  gate.ReleaseAll();
  EXPECT_FALSE(status.ok());
  EXPECT_LT(responses.size(), requests.size());
  // The failure is counted when the pass running at the deadline (message 2) returns; the
  // messages behind it are dropped as expired then. Wait for it; then a call queued behind every
  // message of the stream (one worker, in order): once it is answered, each of them has been
  // settled (and counted, if it were counted), so the count is final. It adds one OK.
  auto failures = [&] {
    return ScrapeMetricSum(port, "mha_requests_total") -
           ScrapeMetricSum(port, "mha_requests_total", R"(code="OK")");
  };
  EXPECT_TRUE(WaitUntil([&] { return failures() >= 1; }, "the stream's failure to be counted"));
  client::TensorClient after({server.target(), 60s});
  ASSERT_TRUE(after.ForwardRaw(SelfAttentionRequest("self_basic", 1, 3, 16)).ok());
  EXPECT_EQ(ScrapeMetricSum(port, "mha_requests_total", R"(code="OK")"),
            static_cast<double>(responses.size()) + 1);
  EXPECT_EQ(failures(), 1) << "one failure ended the stream";
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

TEST(Hardening, ConfigValuesAreCheckedAndNoAbsolutePathLeaks) {
  ModelRepositoryDir repository({"self_basic"});
  for (const auto& [name, json] : std::vector<std::pair<std::string, std::string>>{
           {"zero_queue", R"({"num_heads": 4, "max_queue_size": 0})"},
           {"huge_instances", R"({"num_heads": 4, "instances": 1099511627776})"},
           {"typo", R"({"num_heads": 4, "num_hedas": 2})"}}) {
    const std::string dir = repository.path() + "/" + name;
    std::filesystem::create_directory(dir);
    std::filesystem::copy_file(FixturePath("cases/self_basic/model.safetensors"),
                               dir + "/model.safetensors");
    std::ofstream(dir + "/config.json") << json;
  }
  ServerProcess server;
  ASSERT_TRUE(
      server.Start({"--model-repository", repository.path(), "--default-model", "self_basic"}));
  client::TensorClient client({server.target(), 60s});
  auto models = client.ListModels();
  ASSERT_TRUE(models.ok()) << models.status().ToString();
  std::map<std::string, v1::ModelInfo> by_name;
  for (const auto& m : models->models()) {
    by_name[m.name()] = m;
    EXPECT_EQ(m.source().find(repository.path()), std::string::npos) << m.source();
    EXPECT_EQ(m.error().find(repository.path()), std::string::npos) << m.error();
  }
  EXPECT_EQ(by_name["zero_queue"].state(), v1::FAILED);
  EXPECT_NE(by_name["zero_queue"].error().find("zero_queue/config.json: 'max_queue_size'"),
            std::string::npos)
      << by_name["zero_queue"].error();
  EXPECT_EQ(by_name["huge_instances"].state(), v1::FAILED);
  EXPECT_NE(by_name["huge_instances"].error().find("'instances'"), std::string::npos);
  EXPECT_EQ(by_name["typo"].state(), v1::READY);
  EXPECT_NE(server.log().find("unknown keys (ignored): num_hedas"), std::string::npos);
  EXPECT_EQ(by_name["self_basic"].source(), "self_basic/model.safetensors");
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

}  // namespace hardening_test
}  // namespace mha::testing
