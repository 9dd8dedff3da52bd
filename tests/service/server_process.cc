#include "server_process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "client/tensor_client.h"
#include "test_util.h"
#include "wait.h"

namespace fs = std::filesystem;

namespace mha::testing {
namespace {

int DecodeWaitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A stopping mha-server waits, within its grace period, until every client connection is closed.
// An idle gRPC C++ channel reads its socket only from the library's backup poller, every 5 s by
// default, so a test that stops its server while its own client object is still alive (most do)
// would wait up to 5 s for that client to notice the server's GOAWAY. Test processes poll every
// 50 ms instead; gRPC reads the variable at its first init, after static initialisation.
[[maybe_unused]] const bool kFastBackupPoll =
    setenv("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "50", /*overwrite=*/0) == 0;

}  // namespace

ModelRepositoryDir::ModelRepositoryDir(const std::vector<std::string>& cases,
                                       const std::string& broken_fixture) {
  for (const auto& name : cases) {
    std::error_code ec;
    fs::create_directory_symlink(FixturePath("cases/" + name), fs::path(path()) / name, ec);
    if (ec) ADD_FAILURE() << "cannot link fixture case " << name << ": " << ec.message();
  }
  if (!broken_fixture.empty()) {
    const fs::path broken = fs::path(path()) / "broken";
    std::error_code ec;
    fs::create_directory(broken, ec);
    fs::copy(FixturePath("bad/" + broken_fixture), broken, fs::copy_options::recursive, ec);
    if (ec) ADD_FAILURE() << "cannot copy bad fixture " << broken_fixture << ": " << ec.message();
  }
}

std::string ServerProcess::BinaryPath() { return MHA_SERVER_BINARY; }

namespace {

// The low end of the kernel's ephemeral port range (net.ipv4.ip_local_port_range): binds to
// port 0 and outgoing connections take their ports from there up.
int EphemeralPortsStart() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  return (in >> low) ? low : 32768;
}

// Binds a loopback socket to `port` (0: the kernel picks one) and closes it; the port it had,
// 0 when the bind failed.
int BindLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(addr);
  int bound = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    bound = ntohs(addr.sin_port);
  }
  close(fd);
  return bound;
}

}  // namespace

int ServerProcess::PickFreePort() {
  // Below the ephemeral range, so no parallel test's port-0 server or outgoing connection can
  // take it between this pick and the bind that follows it; the tests that pick ports hold
  // ctest's RESOURCE_LOCK mha_picked_ports (docs/testing.md), so no two pick at once, and one
  // process never gets the same port twice (it may not have bound the last one yet).
  static std::mutex mutex;
  static int next = 0;
  const std::lock_guard<std::mutex> lock(mutex);
  constexpr int kLowest = 10000;
  const int end = EphemeralPortsStart();
  if (end - kLowest < 1000) return BindLoopback(0);  // no room below it: the kernel's pick
  if (next == 0) next = kLowest + static_cast<int>(getpid() % (end - kLowest));
  for (int tries = 0; tries < end - kLowest; ++tries) {
    const int port = next;
    next = next + 1 < end ? next + 1 : kLowest;
    if (BindLoopback(port) == port) return port;
  }
  return 0;
}

::testing::AssertionResult ServerProcess::Start(const std::vector<std::string>& args,
                                                bool wait_until_serving,
                                                const std::map<std::string, std::string>& env,
                                                std::chrono::seconds timeout) {
  if (running()) return ::testing::AssertionFailure() << "server already running";
  const std::string port_file = work_dir() + "/port";
  const std::string log_file = work_dir() + "/server.log";
  std::vector<std::string> argv_strings = {binary_, "--port-file", port_file};
  bool has_address = false, has_metrics_address = false, has_http_address = false;
  for (const auto& a : args) {
    has_address = has_address || a == "--grpc-address";
    has_metrics_address = has_metrics_address || a == "--metrics-address";
    has_http_address = has_http_address || a == "--http-address";
  }
  if (!has_address) argv_strings.insert(argv_strings.end(), {"--grpc-address", "127.0.0.1:0"});
  // Not the default 0.0.0.0:8502: servers of concurrent tests must not collide.
  if (!has_metrics_address) {
    argv_strings.insert(argv_strings.end(), {"--metrics-address", "127.0.0.1:0"});
  }
  // Nor the default 0.0.0.0:8501 (HTTP/REST); its port goes to a file of its own.
  if (!has_http_address) {
    argv_strings.insert(argv_strings.end(), {"--http-address", "127.0.0.1:0"});
  }
  argv_strings.insert(argv_strings.end(), {"--http-port-file", work_dir() + "/http_port"});
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  // The environment is built here: between fork and exec only async-signal-safe calls.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (env.count(entry.substr(0, entry.find('='))) == 0) env_strings.push_back(entry);
  }
  for (const auto& [key, value] : env) env_strings.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return ::testing::AssertionFailure() << "fork failed";
  if (pid == 0) {
    // Child: die with the test process; output to the log file.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int fd = open(log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  pid_ = pid;
  if (!wait_until_serving) return ::testing::AssertionSuccess();

  bool exited = false;
  int status = 0;
  (void)WaitUntil(
      [&] {
        exited = waitpid(pid_, &status, WNOHANG) == pid_;
        const std::string text = ReadFile(port_file);
        if (!exited && !text.empty() && text.back() == '\n') port_ = std::atoi(text.c_str());
        return exited || port_ > 0;
      },
      "the port file", timeout, std::chrono::milliseconds(25));
  if (exited) {
    pid_ = -1;
    exit_code_ = DecodeWaitStatus(status);
    return ::testing::AssertionFailure()
           << "mha-server exited with " << exit_code_ << " before serving; log:\n"
           << log();
  }
  if (port_ <= 0) {
    return ::testing::AssertionFailure() << "no port file after " << timeout.count() << " s; log:\n"
                                         << log();
  }
  client::TensorClient client({target(), std::chrono::milliseconds(5000)});
  auto health = client.CheckHealth("");
  if (!health.ok() || *health != grpc::health::v1::HealthCheckResponse::SERVING) {
    return ::testing::AssertionFailure()
           << "port file written but health is not SERVING ("
           << (health.ok() ? std::to_string(*health) : health.status().ToString()) << ")";
  }
  return ::testing::AssertionSuccess();
}

void ServerProcess::Signal(int signal) const {
  if (pid_ > 0) kill(pid_, signal);
}

int ServerProcess::WaitForExit(std::chrono::seconds timeout) {
  if (pid_ <= 0) return exit_code_;
  int status = 0;
  pid_t r = 0;
  const auto exited = WaitUntil(
      [&] {
        r = waitpid(pid_, &status, WNOHANG);
        return r != 0;
      },
      "mha-server (pid " + std::to_string(pid_) + ") to exit", timeout,
      std::chrono::milliseconds(20));
  if (r < 0) {
    pid_ = -1;
    return -1;
  }
  if (!exited) {
    ADD_FAILURE() << exited.message() << "; SIGKILL. Log:\n" << log();
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
  }
  pid_ = -1;
  exit_code_ = DecodeWaitStatus(status);
  return exit_code_;
}

int ServerProcess::Stop(int signal, std::chrono::seconds timeout) {
  if (pid_ <= 0) return exit_code_;
  Signal(signal);
  return WaitForExit(timeout);
}

ServerProcess::~ServerProcess() {
  if (running()) Stop(SIGTERM, std::chrono::seconds(30));
}

std::string ServerProcess::log() const { return ReadFile(work_dir() + "/server.log"); }

int ServerProcess::http_port() const {
  const std::string text = ReadFile(work_dir() + "/http_port");
  return !text.empty() && text.back() == '\n' ? std::atoi(text.c_str()) : 0;
}

}  // namespace mha::testing
