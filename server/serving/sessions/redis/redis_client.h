// RedisClient: thread-safe use of one Redis server through a few connections (RedisConnection):
// a command borrows an idle connection or makes one, and gives it back unless it broke. While the
// server is unreachable, calls fail fast: after a failed connect, connects are not tried again
// for one connect timeout (the failure is returned at once), so that a caller never waits more
// than one connect timeout plus one command timeout, however many calls it makes.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mha/status.h"
#include "server/serving/sessions/redis/redis_connection.h"

namespace mha::serve {

class RedisClient {
 public:
  // Keeps at most `max_idle` idle connections (more may be open while many callers run at once).
  explicit RedisClient(RedisOptions options, size_t max_idle = 4);

  // Connects now: the startup check (--kv-store at start: unreachable, a wrong password).
  Status Ping();
  // RedisConnection::Command / Pipeline on a borrowed connection.
  StatusOr<RedisReply> Command(const RedisArgs& args,
                               std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  StatusOr<std::vector<StatusOr<RedisReply>>> Pipeline(const std::vector<RedisArgs>& commands);
  // EVAL of a Lua script with its keys and arguments.
  StatusOr<RedisReply> Eval(const std::string& script, const RedisArgs& keys,
                            const RedisArgs& args);
  // A connection of its own (a subscriber's), not from the pool.
  StatusOr<std::unique_ptr<RedisConnection>> Dedicated();

  const RedisOptions& options() const { return options_; }
  std::string address() const { return options_.address.Describe(); }

 private:
  using Conn = std::unique_ptr<RedisConnection>;
  StatusOr<Conn> Borrow();
  void GiveBack(Conn conn);

  const RedisOptions options_;
  const size_t max_idle_;
  std::mutex mu_;
  std::vector<Conn> idle_;                             // guarded by mu_
  Status last_failure_;                                // guarded by mu_
  std::chrono::steady_clock::time_point retry_after_;  // guarded by mu_
};

}  // namespace mha::serve
