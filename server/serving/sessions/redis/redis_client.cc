#include "server/serving/sessions/redis/redis_client.h"

#include <utility>

namespace mha::serve {

RedisClient::RedisClient(RedisOptions options, size_t max_idle)
    : options_(std::move(options)), max_idle_(max_idle) {}

StatusOr<RedisClient::Conn> RedisClient::Borrow() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      Conn conn = std::move(idle_.back());
      idle_.pop_back();
      return conn;
    }
    if (!last_failure_.ok() && std::chrono::steady_clock::now() < retry_after_) {
      return last_failure_;
    }
  }
  auto conn = RedisConnection::Connect(options_);
  std::lock_guard<std::mutex> lock(mu_);
  if (!conn.ok()) {
    last_failure_ = conn.status();
    retry_after_ = std::chrono::steady_clock::now() + options_.connect_timeout;
    return conn.status();
  }
  last_failure_ = Status::Ok();
  return std::move(conn.value());
}

void RedisClient::GiveBack(Conn conn) {
  if (conn->broken()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() < max_idle_) idle_.push_back(std::move(conn));
}

Status RedisClient::Ping() {
  auto reply = Command({"PING"});
  return reply.ok() ? Status::Ok() : reply.status();
}

StatusOr<RedisReply> RedisClient::Command(const RedisArgs& args,
                                          std::chrono::milliseconds timeout) {
  auto conn = Borrow();
  if (!conn.ok()) return conn.status();
  auto reply = (*conn)->Command(args, timeout);
  GiveBack(std::move(conn.value()));
  return reply;
}

StatusOr<std::vector<StatusOr<RedisReply>>> RedisClient::Pipeline(
    const std::vector<RedisArgs>& commands) {
  auto conn = Borrow();
  if (!conn.ok()) return conn.status();
  auto replies = (*conn)->Pipeline(commands);
  GiveBack(std::move(conn.value()));
  return replies;
}

StatusOr<RedisReply> RedisClient::Eval(const std::string& script, const RedisArgs& keys,
                                       const RedisArgs& args) {
  RedisArgs command = {"EVAL", script, std::to_string(keys.size())};
  command.insert(command.end(), keys.begin(), keys.end());
  command.insert(command.end(), args.begin(), args.end());
  return Command(command);
}

StatusOr<std::unique_ptr<RedisConnection>> RedisClient::Dedicated() {
  return RedisConnection::Connect(options_);
}

}  // namespace mha::serve
