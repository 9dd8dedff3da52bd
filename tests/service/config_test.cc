// mha-server's command line: --help documents every flag, flags from the environment and from a
// --config file, JSON logs, and start-up errors that end the process with a clear message.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "service_test_util.h"

namespace mha::testing {
namespace config_test {

// Runs a shell command, returns its exit code and output (stdout + stderr).
int RunCommand(const std::string& command, std::string* output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return -1;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) output->append(buf.data(), n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(ServerConfig, HelpDocumentsEveryFlagAndItsEnvironmentVariable) {
  std::string out;
  ASSERT_EQ(RunCommand(ServerProcess::BinaryPath() + " --help", &out), 0) << out;
  for (const char* flag : {"--grpc-address", "--model-repository", "--default-model", "--device",
                           "--dtype", "--intra-op-threads", "--inter-op-threads", "--workers",
                           "--max-queue-size", "--max-batch-size", "--max-sequence-length",
                           "--max-message-bytes", "--stream-window", "--log-format", "--log-level",
                           "--grace-period-s", "--port-file", "--config", "--device-wait"}) {
    EXPECT_NE(out.find(flag), std::string::npos) << flag << " missing from --help";
  }
  EXPECT_NE(out.find("MHA_MAX_QUEUE_SIZE"), std::string::npos) << out;
  EXPECT_EQ(out.find("--debug-load-delay-ms"), std::string::npos) << "test-only flag is hidden";
}

TEST(ServerConfig, BadFlagValuesAreRejected) {
  std::string out;
  EXPECT_NE(RunCommand(ServerProcess::BinaryPath() + " --log-format xml", &out), 0);
  EXPECT_NE(out.find("log-format"), std::string::npos) << out;
  out.clear();
  EXPECT_NE(RunCommand(ServerProcess::BinaryPath() + " --workers -1", &out), 0);
  EXPECT_NE(out.find("workers"), std::string::npos) << out;
  out.clear();
  EXPECT_NE(RunCommand(ServerProcess::BinaryPath() + " --device-wait yield", &out), 0);
  EXPECT_NE(out.find("device-wait"), std::string::npos) << out;
  out.clear();
  // Tests hold passes with mha-test-server's gate (hold_gate.h); the binary has no such flag.
  EXPECT_NE(RunCommand(ServerProcess::BinaryPath() + " --debug-forward-delay-ms 1", &out), 0);
  EXPECT_NE(out.find("debug-forward-delay-ms"), std::string::npos) << out;
}

TEST(ServerConfig, UnknownDefaultModelStopsTheServerWithTheModelNames) {
  ModelRepositoryDir repository({"self_basic"});
  std::string out;
  const int code = RunCommand(
      ServerProcess::BinaryPath() +
          " --grpc-address 127.0.0.1:0 --metrics-address 127.0.0.1:0 --http-address 127.0.0.1:0 "
          "--model-repository " +
          repository.path() + " --default-model nope",
      &out);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("--default-model 'nope'"), std::string::npos) << out;
  EXPECT_NE(out.find("self_basic"), std::string::npos) << out;
}

TEST(ServerConfig, FlagsFromEnvironmentAndConfigFileWithJsonLogs) {
  ModelRepositoryDir repository({"self_basic"});
  TempDir dir;
  const std::string config = dir.path() + "/server.toml";
  std::ofstream(config) << "max-sequence-length = 8\n";
  ServerProcess server;
  ASSERT_TRUE(server.Start(
      {"--model-repository", repository.path(), "--config", config},
      /*wait_until_serving=*/true,
      {{"MHA_MAX_BATCH_SIZE", "2"}, {"MHA_LOG_FORMAT", "json"}, {"MHA_DEVICE_WAIT", "block"}}));
  client::TensorClient client({server.target(), std::chrono::seconds(60)});
  auto big_batch = client.ForwardRaw(SelfAttentionRequest("", 3, 2, 16));
  ASSERT_FALSE(big_batch.ok());
  EXPECT_EQ(big_batch.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(big_batch.status().message().find("--max-batch-size 2"), std::string::npos)
      << big_batch.status().message();
  auto long_seq = client.ForwardRaw(SelfAttentionRequest("", 1, 9, 16));
  ASSERT_FALSE(long_seq.ok());
  EXPECT_NE(long_seq.status().message().find("--max-sequence-length 8"), std::string::npos)
      << long_seq.status().message();
  EXPECT_TRUE(client.ForwardRaw(SelfAttentionRequest("", 2, 8, 16)).ok());
  ASSERT_EQ(server.Stop(), 0) << server.log();

  std::istringstream log(server.log());
  std::string line;
  int lines = 0;
  bool saw_failure_line = false;
  while (std::getline(log, line)) {
    if (line.empty()) continue;
    ++lines;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(j.is_discarded()) << "not JSON: " << line;
    EXPECT_TRUE(j.contains("level") && j.contains("msg") && j.contains("ts")) << line;
    const std::string msg = j.value("msg", "");
    if (msg.find("code=RESOURCE_EXHAUSTED") != std::string::npos &&
        msg.find("request_id=") != std::string::npos && msg.find("peer=") != std::string::npos) {
      saw_failure_line = true;
    }
  }
  EXPECT_GE(lines, 4);
  EXPECT_NE(server.log().find("device_wait=block"), std::string::npos) << server.log();
  EXPECT_TRUE(saw_failure_line) << "no log line for the failed request:\n" << server.log();
}

}  // namespace config_test
}  // namespace mha::testing
