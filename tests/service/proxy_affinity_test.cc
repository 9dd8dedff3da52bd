// Sessions through a real proxy (docs/scale-out.md): Debian's nginx with the shipped config
// (deploy/proxy/nginx/nginx.conf: consistent hash of x-session-id) in front of real mha-server
// replicas on loopback. Sessions opened by the client library (client/decoding_session.h) spread
// over the replicas and decode exactly; a replica SIGKILLed mid-decode or a replica added (nginx
// reload) mid-decode costs no step: the sessions it held are re-opened and replayed on the
// replica that now owns their hash. Stateless calls without the header are spread too.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/decoding_session.h"
#include "client/tensor_client.h"
#include "nginx_process.h"
#include "session_test_util.h"

namespace mha::testing {
namespace proxy_affinity_test {

// One replica: its own server, repository and metrics port.
struct Replica {
  OwnServer own;
  double Sessions() { return own.Metric("mha_sessions_open"); }
  double Steps() {  // answered session steps (the histogram is labelled by model only)
    return ScrapeMetric(own.metrics_port,
                        "mha_session_step_duration_seconds_count{model=\"decode_causal\"}");
  }
  // Forward calls this replica answered OK (every mha_requests_total series of the model).
  double AnsweredOk() {
    return ScrapeMetricSum(own.metrics_port, "mha_requests_total", R"(code="OK")");
  }
};

class ProxyAffinity : public ::testing::Test {
 protected:
  void SetUp() override {
    c_ = Case("decode_causal");
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(AddReplica());
    ASSERT_TRUE(nginx_.Start(Ports()));
    client_ = std::make_unique<client::TensorClient>(
        client::ClientOptions{nginx_.target(), std::chrono::milliseconds(60000)});
  }
  ::testing::AssertionResult AddReplica() {
    replicas_.push_back(std::make_unique<Replica>());
    return replicas_.back()->own.Start({"--instances", "1"});
  }
  std::vector<int> Ports() const {
    std::vector<int> ports;
    for (const auto& r : replicas_) {
      if (r->own.server.running()) ports.push_back(r->own.server.port());
    }
    return ports;
  }

  // `n` sessions through the proxy, each decoding the fixture's 12-token sequence one token per
  // step (round robin over the sessions); `between(step)` runs before each round. Every answer is
  // checked against PyTorch's full causal forward. Returns the resumes.
  int64_t Decode(int n, const std::function<void(int64_t)>& between) {
    std::vector<std::unique_ptr<client::DecodingSession>> sessions;
    for (int i = 0; i < n; ++i) {
      v1::OpenSessionRequest open;
      open.set_model(c_.name);
      open.set_batch_size(c_.inputs.query.size(0));
      open.set_session_id("proxy-test-" + std::to_string(i));
      auto s = client::DecodingSession::Open(client_.get(), open);
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      if (!s.ok()) return -1;
      sessions.push_back(std::move(s.value()));
    }
    const int64_t total = c_.inputs.query.size(1);
    for (int64_t p = 0; p < total; ++p) {
      between(p);
      for (auto& s : sessions) {
        auto request = client::MakeForwardRequest(StepOf(c_.inputs, p, 1, p + 1), {});
        EXPECT_TRUE(request.ok());
        auto answer = s->Step(*request);
        EXPECT_TRUE(answer.ok()) << s->id() << " step " << p << ": " << answer.status().ToString();
        if (!answer.ok()) return -1;
        auto result = client::ParseForwardResponse(*answer);
        EXPECT_TRUE(result.ok());
        EXPECT_TRUE(TensorsNear(result->output, c_.expected_output.narrow(1, p, 1), 1e-5))
            << s->id() << " token " << p;
      }
    }
    int64_t resumes = 0;
    for (auto& s : sessions) {
      resumes += s->stats().resumes;
      EXPECT_TRUE(s->Close().ok()) << s->id();
    }
    return resumes;
  }

  FixtureCase c_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  Nginx nginx_;
  std::unique_ptr<client::TensorClient> client_;
};

TEST_F(ProxyAffinity, SessionsSpreadOverReplicasAndDecodeExactly) {
  int spread = 0;
  const int64_t resumes = Decode(12, [&](int64_t p) {
    if (p != 1) return;
    double total = 0;
    for (auto& r : replicas_) {
      const double open = r->Sessions();
      total += open;
      spread += open > 0;
    }
    EXPECT_EQ(total, 12) << "every session lives on exactly one replica";
  });
  EXPECT_EQ(resumes, 0);
  EXPECT_GE(spread, 2) << "12 client ids all hashed to one replica";
}

TEST_F(ProxyAffinity, AReplicaKilledMidDecodeCostsNoStep) {
  double held = -1;
  const int64_t resumes = Decode(16, [&](int64_t p) {
    if (p != 6) return;
    held = replicas_[0]->Sessions();
    EXPECT_EQ(replicas_[0]->own.server.Stop(SIGKILL), 128 + SIGKILL);
  });
  EXPECT_EQ(resumes, held) << "each session the killed replica held is resumed once";
}

// Consistent hashing moves a session only to the replica that joined. Before the last round every
// session has stepped where its hash points now, so the sessions open on the new replica are
// exactly those that moved: each of them, and no other, was resumed once.
TEST_F(ProxyAffinity, AReplicaAddedMidDecodeCostsNoStep) {
  const int64_t last = c_.inputs.query.size(1) - 1;
  ASSERT_GT(last, 7);
  double moved = -1;
  const int64_t resumes = Decode(16, [&](int64_t p) {
    if (p == 6) {
      ASSERT_TRUE(AddReplica());
      ASSERT_TRUE(nginx_.Reload(Ports()));
    }
    if (p == last) moved = replicas_.back()->Sessions();
  });
  EXPECT_GE(moved, 0) << "the new replica's metrics did not answer";
  EXPECT_EQ(resumes, moved) << "sessions resumed vs sessions that moved to the new replica";
  std::printf("sessions moved to the fourth replica and resumed there: %lld\n",
              static_cast<long long>(resumes));
}

TEST_F(ProxyAffinity, StatelessCallsWithoutTheHeaderAreSpread) {
  for (int i = 0; i < 24; ++i) {
    auto answer = client_->ForwardRaw(SelfAttentionRequest(c_.name, 1, 4, 32));
    ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  }
  int answered_by = 0;
  double answered = 0;
  for (auto& r : replicas_) {
    const double ok = r->AnsweredOk();
    answered += ok;
    answered_by += ok > 0;
  }
  EXPECT_EQ(answered, 24);
  EXPECT_GE(answered_by, 2) << "24 calls without x-session-id all reached one replica";
}

// mha-client decode through the proxy, a replica SIGKILLed mid-run: 0 errors, resumes. The run is
// frozen (SIGSTOP) while the replica holding the most sessions is killed, so the kill lands
// mid-run whatever the machine's speed.
TEST_F(ProxyAffinity, CliDecodeReportsNoErrorWithAReplicaKilled) {
  const std::string out_file = replicas_[0]->own.server.work_dir() + "/decode.txt";
  const pid_t cli = fork();
  if (cli == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (!freopen(out_file.c_str(), "w", stdout) || !freopen(out_file.c_str(), "a", stderr)) {
      _exit(126);
    }
    execl(MHA_CLIENT_BINARY, MHA_CLIENT_BINARY, "-a", nginx_.target().c_str(), "decode", "-m",
          "decode_causal", "--sessions", "16", "--tokens", "200", static_cast<char*>(nullptr));
    _exit(127);
  }
  size_t victim = replicas_.size();
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (size_t r = 0; r < replicas_.size(); ++r) {
          if (replicas_[r]->Sessions() >= 2 && replicas_[r]->Steps() >= 20) victim = r;
        }
        return victim < replicas_.size();
      },
      "a replica that served 20 steps of 2 sessions", kWaitTimeout, std::chrono::milliseconds(1)));
  ASSERT_EQ(kill(cli, SIGSTOP), 0);
  int status = 0;
  ASSERT_EQ(waitpid(cli, &status, WUNTRACED), cli);
  ASSERT_TRUE(WIFSTOPPED(status)) << "mha-client ended before the kill";
  const double held = replicas_[victim]->Sessions();
  EXPECT_EQ(replicas_[victim]->own.server.Stop(SIGKILL), 128 + SIGKILL);
  ASSERT_EQ(kill(cli, SIGCONT), 0);
  ASSERT_EQ(waitpid(cli, &status, 0), cli);
  std::ifstream in(out_file);
  std::stringstream text;
  text << in.rdbuf();
  std::printf("mha-client decode through nginx, replica %zu (%g sessions) killed mid-run:\n%s",
              victim, held, text.str().c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text.str();
  EXPECT_TRUE(Contains(text.str(), "3200 ok, 0 errors")) << text.str();
  EXPECT_TRUE(Contains(text.str(), "resumed: " + std::to_string(static_cast<int>(held)) +
                                       " sessions re-opened and replayed"))
      << text.str() << "(the killed replica held " << held << ")";
}

}  // namespace proxy_affinity_test
}  // namespace mha::testing
