#include "redis_server.h"

#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "wait.h"

namespace mha::testing {
namespace {

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

}  // namespace

RedisServer::RedisServer() {
  char tmpl[] = "/tmp/mha-redis-XXXXXX";
  const char* made = mkdtemp(tmpl);
  dir_ = made != nullptr ? made : "";
}

RedisServer::~RedisServer() {
  Stop();
  std::error_code ignored;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
}

std::string RedisServer::BinaryPath() {
  const char* path = std::getenv("MHA_REDIS_SERVER");
  return path != nullptr && *path != '\0' ? path : "/usr/bin/redis-server";
}

std::string RedisServer::url(int db) const {
  return "redis://127.0.0.1:" + std::to_string(port_) + "/" + std::to_string(db);
}

serve::RedisOptions RedisServer::options(int db) const {
  serve::RedisOptions o;
  o.address = {"127.0.0.1", port_, db};
  o.password = options_.password;
  return o;
}

std::string RedisServer::log() const {
  std::ifstream in(dir_ + "/redis.log");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void RedisServer::WriteConfig() const {
  std::ofstream conf(dir_ + "/redis.conf");
  conf << "bind 127.0.0.1\nport " << port_ << "\ndir " << dir_ << "\nlogfile " << dir_
       << "/redis.log\ndaemonize no\nsave \"\"\n";
  if (options_.persistent) conf << "appendonly yes\nappendfsync always\n";
  if (!options_.password.empty()) conf << "requirepass " << options_.password << "\n";
  if (options_.maxmemory > 0) {
    conf << "maxmemory " << options_.maxmemory << "\nmaxmemory-policy noeviction\n";
  }
}

::testing::AssertionResult RedisServer::Start(RedisServerOptions options) {
  if (access(BinaryPath().c_str(), X_OK) != 0) {
    return ::testing::AssertionFailure()
           << BinaryPath() << " missing (scripts/install-deps.sh test installs redis-server)";
  }
  options_ = std::move(options);
  // The port was free a moment ago; a parallel test's server may take it before redis binds it:
  // then redis exits, and another port is tried.
  ::testing::AssertionResult launched = ::testing::AssertionFailure();
  for (int attempt = 0; attempt < 3 && !launched; ++attempt) {
    port_ = FreeLoopbackPort();
    launched = Launch();
  }
  return launched;
}

::testing::AssertionResult RedisServer::Launch() {
  WriteConfig();
  const std::string binary = BinaryPath(), conf = dir_ + "/redis.conf";
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    execl(binary.c_str(), binary.c_str(), conf.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  bool exited = false;
  auto up = WaitUntil(
      [&] {
        exited = waitpid(pid_, nullptr, WNOHANG) == pid_;
        return exited || Command({"PING"}).ok();
      },
      "redis-server to answer PING on port " + std::to_string(port_));
  if (exited) {
    pid_ = -1;
    return ::testing::AssertionFailure() << "redis-server exited:\n" << log();
  }
  if (!up) up << ":\n" << log();
  return up;
}

bool RedisServer::Stop() {
  if (pid_ <= 0) return false;
  kill(pid_, SIGCONT);  // a paused server cannot handle SIGTERM
  kill(pid_, SIGTERM);
  // A grace period, not a check: a server that has not exited by then is killed.
  const bool exited = WaitUntil([&] { return waitpid(pid_, nullptr, WNOHANG) == pid_; },
                                "redis-server to exit", std::chrono::seconds(10));
  if (!exited) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  pid_ = -1;
  return true;
}

::testing::AssertionResult RedisServer::Restart() {
  Stop();
  return Launch();
}

void RedisServer::Pause() {
  if (pid_ > 0) kill(pid_, SIGSTOP);
}

void RedisServer::Resume() {
  if (pid_ > 0) kill(pid_, SIGCONT);
}

StatusOr<serve::RedisReply> RedisServer::Command(const serve::RedisArgs& args) const {
  auto conn = serve::RedisConnection::Connect(options());
  if (!conn.ok()) return conn.status();
  return (*conn)->Command(args);
}

}  // namespace mha::testing
