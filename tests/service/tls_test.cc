// TLS and mTLS on the gRPC port (docs/security.md): certificates made by openssl at test time
// (make_test_certs.sh), the real mha-server binary, clients of client/credentials.h. TLS servers
// start with wait_until_serving=false (ServerProcess polls health in plaintext) and are waited
// for here: the port file appears once the server is SERVING, then health is asked over TLS.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "service_test_util.h"

namespace mha::testing {
namespace tls_test {

using namespace std::chrono_literals;
using grpc::health::v1::HealthCheckResponse;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// An exited child stays a zombie until ServerProcess reaps it: /proc/PID/stat state 'Z' (or gone).
bool HasExited(pid_t pid) {
  const std::string stat = ReadText("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] == 'Z';
}

class Tls : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs_ = new TempDir;
    const std::string command = std::string(MHA_MAKE_TEST_CERTS) + " " + certs_->path();
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  static void TearDownTestSuite() {
    delete certs_;
    certs_ = nullptr;
  }
  static std::string Cert(const std::string& name) { return certs_->File(name); }
  void SetUp() override {
    ASSERT_TRUE(std::ifstream(Cert("wrong.key")).good()) << "make_test_certs.sh made no certs";
  }

  std::vector<std::string> ServerTlsArgs(bool mtls) const {
    std::vector<std::string> args = {"--model-repository", repository_.path(), "--tls-cert-file",
                                     Cert("server.pem"),   "--tls-key-file",   Cert("server.key")};
    if (mtls) args.insert(args.end(), {"--tls-client-ca-file", Cert("ca.pem")});
    return args;
  }

  // Starts a TLS server and waits for its port file (written once SERVING); sets target_.
  ::testing::AssertionResult StartTlsServer(bool mtls) {
    auto started = server_.Start(ServerTlsArgs(mtls), /*wait_until_serving=*/false);
    if (!started) return started;
    std::string text;
    const bool ended = static_cast<bool>(WaitUntil(
        [&] {
          text = ReadText(server_.work_dir() + "/port");
          return (!text.empty() && text.back() == '\n') || HasExited(server_.pid());
        },
        "the TLS server's port file", 90s, 25ms));
    if (ended && !text.empty() && text.back() == '\n') {
      target_ = "127.0.0.1:" + std::to_string(std::atoi(text.c_str()));
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "TLS server did not serve; log:\n" << server_.log();
  }

  client::ClientOptions Options(const std::string& cert = "", const std::string& key = "") const {
    client::ClientOptions options{target_, 10s};
    options.tls.ca_file = Cert("ca.pem");
    options.tls.cert_file = cert.empty() ? "" : Cert(cert);
    options.tls.key_file = key.empty() ? "" : Cert(key);
    return options;
  }

  // Health + a Forward on the built-in check model (self_basic: E=16).
  static ::testing::AssertionResult Works(client::TensorClient& client) {
    auto health = client.CheckHealth("");
    if (!health.ok()) return ::testing::AssertionFailure() << health.status().ToString();
    if (*health != HealthCheckResponse::SERVING) {
      return ::testing::AssertionFailure() << "health " << *health;
    }
    auto forward = client.ForwardRaw(SelfAttentionRequest("", 2, 3, 16));
    if (!forward.ok()) return ::testing::AssertionFailure() << forward.status().ToString();
    if (forward->output().shape_size() != 3) return ::testing::AssertionFailure() << "no output";
    return ::testing::AssertionSuccess();
  }

  static TempDir* certs_;
  ModelRepositoryDir repository_{std::vector<std::string>{"self_basic"}};
  ServerProcess server_;
  std::string target_;
};

TempDir* Tls::certs_ = nullptr;

TEST_F(Tls, ForwardAndHealthWorkOverTls) {
  ASSERT_TRUE(StartTlsServer(/*mtls=*/false));
  EXPECT_NE(server_.log().find("port " + target_.substr(target_.find(':') + 1) + ", TLS)"),
            std::string::npos)
      << server_.log();
  client::TensorClient client(Options());
  EXPECT_TRUE(Works(client));
  // The certificate is for 127.0.0.1 and localhost: verifying it for another name fails, and
  // --tls-server-name picks the name to verify (the target stays an IP address).
  auto wrong_name = Options();
  wrong_name.tls.server_name = "not-the-server.example";
  client::TensorClient wrong(wrong_name);
  EXPECT_FALSE(wrong.CheckHealth("").ok()) << "server certificate not verified against the name";
  auto right_name = Options();
  right_name.tls.server_name = "localhost";
  client::TensorClient right(right_name);
  EXPECT_TRUE(Works(right));
}

TEST_F(Tls, PlaintextClientFailsAgainstATlsServer) {
  ASSERT_TRUE(StartTlsServer(/*mtls=*/false));
  client::TensorClient plaintext({target_, 10s});
  auto health = plaintext.CheckHealth("");
  ASSERT_FALSE(health.ok()) << "a plaintext client got an answer from a TLS server";
  EXPECT_EQ(health.status().code(), StatusCode::kUnavailable) << health.status().ToString();
  EXPECT_FALSE(plaintext.ForwardRaw(SelfAttentionRequest("", 1, 2, 16)).ok());
  // A client that does not trust the server's CA (another CA as roots) fails too.
  auto other_roots = Options();
  other_roots.tls.ca_file = Cert("other-ca.pem");
  client::TensorClient untrusting(other_roots);
  EXPECT_FALSE(untrusting.CheckHealth("").ok());
  client::TensorClient tls(Options());
  EXPECT_TRUE(Works(tls)) << "the server itself is fine";
}

TEST_F(Tls, MutualTlsRefusesClientsWithoutACertificateFromTheClientCa) {
  ASSERT_TRUE(StartTlsServer(/*mtls=*/true));
  EXPECT_NE(server_.log().find("mTLS"), std::string::npos) << server_.log();
  client::TensorClient no_cert(Options());
  auto refused = no_cert.CheckHealth("");
  EXPECT_FALSE(refused.ok()) << "a client without a certificate was served";
  EXPECT_FALSE(no_cert.ForwardRaw(SelfAttentionRequest("", 1, 2, 16)).ok());

  client::TensorClient other_ca(Options("other-client.pem", "other-client.key"));
  EXPECT_FALSE(other_ca.CheckHealth("").ok()) << "a certificate from another CA was accepted";
  EXPECT_FALSE(other_ca.ForwardRaw(SelfAttentionRequest("", 1, 2, 16)).ok());

  client::TensorClient good(Options("client.pem", "client.key"));
  EXPECT_TRUE(Works(good));
}

// Exit code and log of a server that should refuse to start.
int RunRefused(const std::vector<std::string>& args, std::string* log) {
  ServerProcess server;
  EXPECT_TRUE(server.Start(args, /*wait_until_serving=*/false));
  const int code = server.WaitForExit(60s);
  *log = server.log();
  return code;
}

TEST_F(Tls, MismatchedKeyAndCertificateStopTheServerNamingTheFile) {
  std::string log;
  const int code = RunRefused({"--model-repository", repository_.path(), "--tls-cert-file",
                               Cert("server.pem"), "--tls-key-file", Cert("wrong.key")},
                              &log);
  EXPECT_EQ(code, 2) << log;
  EXPECT_NE(log.find(Cert("wrong.key")), std::string::npos) << log;
  EXPECT_NE(log.find("does not match"), std::string::npos) << log;
}

TEST_F(Tls, BadTlsConfigurationsStopTheServerWithAClearMessage) {
  const std::string missing = certs_->File("missing.pem");
  struct Case {
    std::vector<std::string> args;
    std::string expected;  // part of the error line
  } cases[] = {
      {{"--tls-cert-file", Cert("server.pem")}, "--tls-key-file is not"},
      {{"--tls-key-file", Cert("server.key")}, "--tls-cert-file is not"},
      {{"--tls-client-ca-file", Cert("ca.pem")}, "needs server TLS"},
      {{"--tls-cert-file", missing, "--tls-key-file", Cert("server.key")},
       missing + ": cannot be read"},
      {{"--tls-cert-file", Cert("server.pem"), "--tls-key-file", Cert("server.pem")},
       "--tls-key-file " + Cert("server.pem") + ": no unencrypted PEM private key"},
      {{"--tls-cert-file", Cert("server.pem"), "--tls-key-file", Cert("server.key"),
        "--tls-client-ca-file", missing},
       "--tls-client-ca-file " + missing + ": cannot be read"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"--model-repository", repository_.path()};
    args.insert(args.end(), c.args.begin(), c.args.end());
    std::string log;
    EXPECT_EQ(RunRefused(args, &log), 2) << c.expected << "\n" << log;
    EXPECT_NE(log.find(c.expected), std::string::npos) << log;
  }
  // The same files from the environment (MHA_TLS_...) are read and checked the same way.
  ServerProcess server;
  ASSERT_TRUE(server.Start(
      {"--model-repository", repository_.path()},
      /*wait_until_serving=*/false,
      {{"MHA_TLS_CERT_FILE", Cert("server.pem")}, {"MHA_TLS_KEY_FILE", Cert("other-client.key")}}));
  EXPECT_EQ(server.WaitForExit(60s), 2) << server.log();
  EXPECT_NE(server.log().find(Cert("other-client.key")), std::string::npos) << server.log();
}

TEST_F(Tls, ClientLibraryRefusesUnreadableFilesInsteadOfFallingBackToPlaintext) {
  client::TlsClientOptions tls;
  EXPECT_FALSE(tls.enabled());
  tls.ca_file = certs_->File("missing.pem");
  auto credentials = client::MakeChannelCredentials(tls);
  ASSERT_FALSE(credentials.ok());
  EXPECT_NE(credentials.status().message().find("missing.pem"), std::string::npos);
  tls.ca_file = Cert("ca.pem");
  tls.cert_file = Cert("client.pem");  // no key
  EXPECT_FALSE(client::MakeChannelCredentials(tls).ok());
  client::ClientOptions options{"127.0.0.1:1", 1s};
  options.tls.ca_file = certs_->File("missing.pem");
  EXPECT_THROW(client::AttentionClient{options}, std::invalid_argument);
}

}  // namespace tls_test
}  // namespace mha::testing
