// A real mha-server child process for the service tests: started on 127.0.0.1:0 with
// --port-file in a private temp folder, waited for (port file + health SERVING), stopped by PID
// (SIGTERM, then SIGKILL after a timeout). The child gets PR_SET_PDEATHSIG so that it can never
// outlive a crashed test.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"

namespace mha::testing {

// A model repository: symlinks to fixture case folders, plus copies of broken ones.
class ModelRepositoryDir {
 public:
  // Every case in cases/index.json (or just `cases`), and bad/<name> as model "broken".
  explicit ModelRepositoryDir(const std::vector<std::string>& cases,
                              const std::string& broken_fixture = "");
  const std::string& path() const { return dir_.path(); }

 private:
  TempDir dir_;
};

class ServerProcess {
 public:
  ServerProcess() = default;
  ~ServerProcess();  // stops the server if still running
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // The binary Start runs: mha-server (BinaryPath) unless set, e.g. to mha-test-server
  // (hold_gate.h), which takes the same flags.
  void set_binary(std::string path) { binary_ = std::move(path); }

  // Starts the server binary with `args` (plus --port-file; plus --grpc-address 127.0.0.1:0 unless
  // args name an address). With wait_until_serving, returns once the port file exists and health
  // says SERVING; fails with the server's log when it exits or times out first.
  ::testing::AssertionResult Start(const std::vector<std::string>& args,
                                   bool wait_until_serving = true,
                                   const std::map<std::string, std::string>& env = {},
                                   std::chrono::seconds timeout = std::chrono::seconds(90));

  // Sends `signal`, waits up to `timeout` for the exit (then SIGKILL). Returns the exit code, or
  // 128 + signal number when the process was killed by a signal, or -1 when it was not running.
  int Stop(int signal = 15, std::chrono::seconds timeout = std::chrono::seconds(60));
  // Sends a signal without waiting.
  void Signal(int signal) const;
  // Waits for the exit (after Signal); same return values as Stop.
  int WaitForExit(std::chrono::seconds timeout);

  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string log() const;  // everything the server wrote to stdout/stderr
  // The HTTP/REST port (written before the gRPC port file); 0 when REST is off or not yet up.
  int http_port() const;
  const std::string& work_dir() const { return dir_.path(); }

  // Path of the mha-server binary under test.
  static std::string BinaryPath();
  // A loopback port below the ephemeral range that was free a moment ago, for tests that must know
  // it before the port file exists (they hold RESOURCE_LOCK mha_picked_ports); 0 when none is.
  static int PickFreePort();

 private:
  TempDir dir_;
  std::string binary_ = BinaryPath();
  pid_t pid_ = -1;
  int port_ = 0;
  int exit_code_ = -1;
};

}  // namespace mha::testing
