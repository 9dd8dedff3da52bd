// Hardening (issue 10): legal requests that would blow the response or the memory up are refused
// before any compute, slow HTTP clients cannot starve the health endpoint, the server exits
// within its grace period whatever runs, bad bytes get a precise code, echoed strings are capped,
// each answered request is counted once, no absolute path leaks, config.json is checked.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <thread>

#include "service_test_util.h"

namespace mha::testing {
namespace {

using namespace std::chrono_literals;

v1::Tensor WireBf16(const std::vector<int64_t>& shape) {
  v1::Tensor t;
  t.set_dtype(v1::BFLOAT16);
  int64_t n = 1;
  for (int64_t d : shape) {
    t.add_shape(d);
    n *= d;
  }
  t.mutable_data()->assign(static_cast<size_t>(n) * 2, '\0');
  return t;
}

TEST(Hardening, ResponseOverTheBudgetIsRefusedBeforeComputeAndTheServerGoesOn) {
  ServerProcess server;  // the built-in model: E=512, H=8
  ASSERT_TRUE(server.Start({}));
  client::TensorClient client({server.target(), 120s});
  // B=8, T=S=4096, per-head weights: 8*8*4096*4096 floats = 4 GiB, over protobuf's 2 GiB.
  v1::ForwardRequest big;
  *big.mutable_query() = WireBf16({8, 4096, 512});
  big.set_need_weights(true);
  big.set_average_attn_weights(false);
  auto refused = client.ForwardRaw(big);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  for (const char* part : {"--max-response-bytes 1073741824", "averaged weights", "bytes"}) {
    EXPECT_NE(refused.status().message().find(part), std::string::npos)
        << part << " not in: " << refused.status().message();
  }
  // Averaged weights fit the response budget; the working memory (per-head scores) does not.
  big.set_average_attn_weights(true);
  auto work = client.ForwardRaw(big);
  ASSERT_FALSE(work.ok());
  EXPECT_NE(work.status().message().find("--max-work-bytes"), std::string::npos)
      << work.status().message();
  auto after = client.ForwardRaw(SelfAttentionRequest("", 1, 4, 512));
  EXPECT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

int ReadPortFile(const std::string& path) {
  for (int i = 0; i < 500; ++i) {
    std::ifstream in(path);
    int port = 0;
    if (in >> port && port > 0) return port;
    std::this_thread::sleep_for(10ms);
  }
  return 0;
}

// A client that sends half a request and then one byte now and then, never finishing it.
int SlowSocket(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
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
    ASSERT_TRUE(res) << "probe " << i << " got no answer with 16 slow clients holding connections";
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
  // Every pass first sleeps 20 s: a pass is surely running when the signal comes.
  ASSERT_TRUE(server.Start({"--grace-period-s", "0.3", "--debug-forward-delay-ms", "20000"}));
  client::TensorClient client({server.target(), 60s});
  std::promise<Status> answer;
  std::thread call([&] { answer.set_value(client.ForwardRaw(SelfAttentionRequest("", 1, 4, 512)).status()); });
  std::this_thread::sleep_for(500ms);  // the call is in the pass (or about to be)
  const auto start = std::chrono::steady_clock::now();
  server.Signal(SIGTERM);
  const int code = server.WaitForExit(30s);
  const auto took = std::chrono::steady_clock::now() - start;
  call.join();
  EXPECT_EQ(code, 0) << server.log();
  // grace 0.3 s + 1 s, with room for a loaded machine; the pass alone would take 20 s.
  EXPECT_LT(took, 6s) << server.log();
  const Status status = answer.get_future().get();
  EXPECT_FALSE(status.ok());
}

}  // namespace
}  // namespace mha::testing
