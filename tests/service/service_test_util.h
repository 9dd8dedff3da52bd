// Helpers shared by the service tests: wire tensors built by hand (to send malformed ones on
// purpose), fixture inputs as client requests, and the "server still answers" check.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "client/tensor_client.h"
#include "proto/wire/tensor_codec.h"
#include "server_process.h"
#include "test_util.h"
#include "wait.h"
#include "wire_tensors.h"

namespace mha::testing {

// A TCP connection to 127.0.0.1:port, or -1.
inline int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
  close(fd);
  return -1;
}

// Waits until `server`'s log holds `text` (looking every 10 ms, at most `timeout`).
inline ::testing::AssertionResult WaitForLog(const ServerProcess& server, const std::string& text,
                                             std::chrono::milliseconds timeout = kWaitTimeout) {
  auto logged = WaitUntil([&] { return server.log().find(text) != std::string::npos; },
                          "the server to log '" + text + "'", timeout);
  if (!logged) logged << "; log:\n" << server.log();
  return logged;
}

// Self-attention request for a model with embed dim `e`.
inline v1::ForwardRequest SelfAttentionRequest(const std::string& model, int64_t b, int64_t t,
                                               int64_t e) {
  v1::ForwardRequest r;
  r.set_model(model);
  *r.mutable_query() = WireFloat({b, t, e});
  return r;
}

// The fixture case's inputs and flags as a request for model `model`.
inline v1::ForwardRequest CaseRequest(const FixtureCase& c, const std::string& model) {
  client::ForwardOptions options;
  options.model = model;
  auto request = client::MakeForwardRequest(c.inputs, options);
  EXPECT_TRUE(request.ok()) << request.status().ToString();
  return request.ok() ? request.value() : v1::ForwardRequest();
}

// The answer to `c` (decoded) matches PyTorch's expected output/weights within atol.
inline void ExpectMatchesCase(const v1::ForwardResponse& response, const FixtureCase& c,
                              double atol = 1e-5) {
  auto result = client::ParseForwardResponse(response);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(TensorsNear(result->output, c.expected_output, atol)) << c.name << " output";
  if (c.inputs.need_weights) {
    EXPECT_TRUE(TensorsNear(result->attn_weights, c.expected_weights, atol))
        << c.name << " attn_weights";
  } else {
    EXPECT_FALSE(response.has_attn_weights()) << c.name << ": weights sent though not asked for";
  }
}

}  // namespace mha::testing

namespace mha::testing {

// One mha-server (and its repository) shared by the tests of a suite: started in
// SetUpTestSuite, stopped in TearDownTestSuite (which also checks the clean exit code 0).
struct SharedServer {
  std::unique_ptr<ModelRepositoryDir> repository;
  std::unique_ptr<ServerProcess> server;
  std::string error;

  void Start(const std::vector<std::string>& cases, const std::string& broken,
             std::vector<std::string> args) {
    repository = std::make_unique<ModelRepositoryDir>(cases, broken);
    args.insert(args.begin(), {"--model-repository", repository->path()});
    server = std::make_unique<ServerProcess>();
    auto started = server->Start(args);
    if (!started) error = started.message();
  }
  void Stop() {
    if (server && server->running()) {
      const int code = server->Stop();
      EXPECT_EQ(code, 0) << "mha-server did not exit cleanly on SIGTERM; log:\n" << server->log();
    }
    server.reset();
    repository.reset();
  }
  std::unique_ptr<client::TensorClient> Client(int timeout_ms = 60000) const {
    return std::make_unique<client::TensorClient>(
        client::ClientOptions{server->target(), std::chrono::milliseconds(timeout_ms)});
  }
};

// What a SharedServerTest suite serves: fixture cases, a broken one ("" = none), mha-server flags.
struct SharedServerSpec {
  std::vector<std::string> cases;
  std::string broken;
  std::vector<std::string> args;
};

// A suite whose tests share one mha-server: Derived defines `static SharedServerSpec Spec()`.
// SetUp checks that the server started and gives each test a client.
template <typename Derived>
class SharedServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shared_ = new SharedServer();
    const SharedServerSpec spec = Derived::Spec();
    shared_->Start(spec.cases, spec.broken, spec.args);
  }
  static void TearDownTestSuite() {
    shared_->Stop();
    delete shared_;
    shared_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(shared_->error.empty()) << shared_->error;
    client_ = shared_->Client();
  }

  inline static SharedServer* shared_ = nullptr;
  std::unique_ptr<client::TensorClient> client_;
};

}  // namespace mha::testing
