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
#include "session_test_util.h"

namespace mha::testing {
namespace proxy_affinity_test {

// The nginx binary: Debian's, or MHA_NGINX (a machine that carries its own, e.g. the GPU device).
const char* NginxPath() {
  const char* path = std::getenv("MHA_NGINX");
  return path != nullptr && *path != '\0' ? path : "/usr/sbin/nginx";
}

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

// nginx started by the test on a free loopback port, with the shipped config's upstream lines
// replaced by the replicas' ports; stopped (SIGQUIT, then SIGKILL) by PID.
class Nginx {
 public:
  ~Nginx() { Stop(); }
  ::testing::AssertionResult Start(const std::vector<int>& ports) {
    const char* nginx = NginxPath();
    if (access(nginx, X_OK) != 0) {
      return ::testing::AssertionFailure() << nginx << " missing (scripts/install-deps.sh test)";
    }
    port_ = ServerProcess::PickFreePort();
    WriteConfig(ports);
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      execl(nginx, nginx, "-p", dir_.path().c_str(), "-c", config().c_str(), "-g", "daemon off;",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    auto listening = WaitUntil(
        [&] {
          const int fd = ConnectLoopback(port_);
          if (fd >= 0) close(fd);
          return fd >= 0;
        },
        "nginx to listen on " + std::to_string(port_));
    if (!listening) listening << ":\n" << Log();
    return listening;
  }
  // New upstreams: the config rewritten, SIGHUP; returns once a new worker process has started
  // and the old one (worker_processes 1) has exited. Until then the old worker still serves the
  // client's open connection with the old upstreams, and a session could step on either side.
  ::testing::AssertionResult Reload(const std::vector<int>& ports) {
    const std::string log = Log();
    const size_t workers = Count(log, "start worker process");
    const size_t exited = Count(log, "exited with code");
    WriteConfig(ports);
    kill(pid_, SIGHUP);
    auto reloaded = WaitUntil(
        [&] {
          const std::string now = Log();
          return Count(now, "start worker process") > workers &&
                 Count(now, "exited with code") > exited;
        },
        "nginx to reload (a new worker, the old one gone)");
    if (!reloaded) reloaded << ":\n" << Log();
    return reloaded;
  }
  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGQUIT);
    // A grace period, not a check: nginx that has not quit by then is killed.
    (void)WaitUntil([&] { return waitpid(pid_, nullptr, WNOHANG) != 0; }, "nginx to quit",
                    std::chrono::seconds(5));
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string Log() const {
    std::ifstream in(dir_.path() + "/error.log");
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  std::string config() const { return dir_.path() + "/nginx.conf"; }
  static size_t Count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }
  // The shipped config with every run of upstream lines ("        server 127.0.0.1:PORT ...")
  // replaced by the replicas, "listen 127.0.0.1:PORT" on this test's port and "error_log ...;" a
  // file at notice level (to see reloads); nothing else changes. Plain line parsing.
  void WriteConfig(const std::vector<int>& ports) {
    std::ifstream in(std::string(MHA_SOURCE_DIR) + "/deploy/proxy/nginx/nginx.conf");
    std::string servers;
    for (int p : ports) {
      servers +=
          "        server 127.0.0.1:" + std::to_string(p) + " max_fails=1 fail_timeout=10s;\n";
    }
    std::string text, line;
    bool in_upstream_run = false;
    while (std::getline(in, line)) {
      const bool upstream = StartsWithAddress(line, "        server 127.0.0.1:");
      if (upstream && !in_upstream_run) text += servers;
      in_upstream_run = upstream;
      if (upstream) continue;
      text += ReplaceAddress(ReplaceDirective(line, "error_log ", "error_log error.log notice;"),
                             "listen 127.0.0.1:", std::to_string(port_)) +
              "\n";
    }
    std::ofstream(config()) << text;
  }
  // `line` starts with `prefix` followed by at least one digit.
  static bool StartsWithAddress(const std::string& line, const std::string& prefix) {
    return line.compare(0, prefix.size(), prefix) == 0 && line.size() > prefix.size() &&
           std::isdigit(static_cast<unsigned char>(line[prefix.size()]));
  }
  // `prefix` + digits in `line` with those digits replaced by `port`.
  static std::string ReplaceAddress(std::string line, const std::string& prefix,
                                    const std::string& port) {
    const size_t at = line.find(prefix);
    if (at == std::string::npos) return line;
    size_t end = at + prefix.size();
    while (end < line.size() && std::isdigit(static_cast<unsigned char>(line[end]))) ++end;
    if (end == at + prefix.size()) return line;
    return line.replace(at + prefix.size(), end - at - prefix.size(), port);
  }
  // `directive` up to its ';' in `line` replaced by `with`.
  static std::string ReplaceDirective(std::string line, const std::string& directive,
                                      const std::string& with) {
    const size_t at = line.find(directive);
    const size_t end = at == std::string::npos ? at : line.find(';', at);
    if (end == std::string::npos) return line;
    return line.replace(at, end + 1 - at, with);
  }

  TempDir dir_;
  pid_t pid_ = -1;
  int port_ = 0;
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
