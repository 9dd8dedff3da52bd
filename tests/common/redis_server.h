// A real redis-server for the tests (Debian's /usr/bin/redis-server, or MHA_REDIS_SERVER): started
// on a free loopback port with a config file in a private temp folder (no persistence unless asked,
// optional requirepass and maxmemory), waited for (PING answered), stopped by PID (SIGTERM, then
// SIGKILL). Restart brings it back on the same port (with its data when persistence is on). Pause
// (SIGSTOP) makes it a server that accepts but never answers: the "slow Redis" of the fault
// tests, deterministic. The child gets PR_SET_PDEATHSIG so that it never outlives a crashed test.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <cstdint>
#include <string>

#include "server/serving/sessions/redis/redis_connection.h"

namespace mha::testing {

struct RedisServerOptions {
  std::string password;     // requirepass; "" = none
  int64_t maxmemory = 0;    // bytes; 0 = none (with noeviction: writes past it are refused)
  bool persistent = false;  // appendonly with fsync always: Restart keeps the data
};

class RedisServer {
 public:
  RedisServer();
  ~RedisServer();  // stops it, removes its folder
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  ::testing::AssertionResult Start(RedisServerOptions options = {});
  // SIGTERM (SIGKILL after 10 s); true when it was running.
  bool Stop();
  // Stop, then Start on the same port with the same options.
  ::testing::AssertionResult Restart();
  void Pause();   // SIGSTOP: connections open, nothing answered
  void Resume();  // SIGCONT

  int port() const { return port_; }
  std::string url(int db = 0) const;              // redis://127.0.0.1:PORT/db
  serve::RedisOptions options(int db = 0) const;  // with the password, 1 s timeouts
  const std::string& dir() const { return dir_; }
  std::string log() const;
  // One command on a fresh connection (the admin's redis-cli): the reply or the failure.
  StatusOr<serve::RedisReply> Command(const serve::RedisArgs& args) const;

  // redis-server: MHA_REDIS_SERVER or Debian's (Start fails naming it when it is missing).
  static std::string BinaryPath();

 private:
  ::testing::AssertionResult Launch();
  void WriteConfig() const;

  std::string dir_;
  RedisServerOptions options_;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace mha::testing
