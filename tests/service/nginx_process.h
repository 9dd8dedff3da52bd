// nginx started by a test (Debian's, or MHA_NGINX) on a free loopback port with the shipped
// config (deploy/proxy/nginx/nginx.conf: a consistent hash of x-session-id), its upstream lines
// replaced by the replicas' ports; reloaded with new upstreams (SIGHUP, waited for); stopped by
// PID. Used by the proxy tests (proxy_affinity_test.cc, kv_store_test.cc).
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "server_process.h"
#include "service_test_util.h"
#include "test_util.h"
#include "wait.h"

namespace mha::testing {

// The nginx binary: Debian's, or MHA_NGINX (a machine that carries its own, e.g. the GPU device).
inline const char* NginxPath() {
  const char* path = std::getenv("MHA_NGINX");
  return path != nullptr && *path != '\0' ? path : "/usr/sbin/nginx";
}

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

}  // namespace mha::testing
