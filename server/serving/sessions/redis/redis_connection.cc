#include "server/serving/sessions/redis/redis_connection.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "mha/text.h"

namespace mha::serve {
namespace {

timeval ToTimeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

// hiredis writes with write(2): a peer that closed the socket must not kill the process.
void IgnoreSigpipe() {
  static std::once_flag once;
  std::call_once(once, [] { signal(SIGPIPE, SIG_IGN); });
}

bool StartsWith(const std::string& s, const char* prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

RedisReply Copy(const redisReply& r) {
  RedisReply out;
  switch (r.type) {
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::kString;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::kStatus;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::kInteger;
      out.integer = r.integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::kArray;
      for (size_t i = 0; i < r.elements; ++i) out.elements.push_back(Copy(*r.element[i]));
      break;
    default:
      out.type = RedisReply::Type::kNil;
  }
  return out;
}

// The reply (freed here) as a RedisReply, or its error's Status.
StatusOr<RedisReply> Take(redisReply* reply, const std::string& address) {
  std::unique_ptr<redisReply, void (*)(void*)> owned(reply, freeReplyObject);
  if (reply->type == REDIS_REPLY_ERROR) {
    return RedisErrorStatus(address, std::string(reply->str, reply->len));
  }
  return Copy(*reply);
}

}  // namespace

Status RedisErrorStatus(const std::string& address, const std::string& error) {
  const std::string said = "redis at " + address + " answered '" + Abbreviate(error) + "'";
  if (StartsWith(error, "NOAUTH") || StartsWith(error, "WRONGPASS")) {
    return Unauthenticated(said +
                           ": check the password (--kv-store-password-file or "
                           "--kv-store-password-env)");
  }
  if (StartsWith(error, "OOM")) {
    return ResourceExhausted(said + ": the store is at its maxmemory and refuses writes");
  }
  for (const char* busy : {"LOADING", "BUSY", "MASTERDOWN", "READONLY", "TRYAGAIN"}) {
    if (StartsWith(error, busy)) return Unavailable(said);
  }
  if (error.find("FENCED") != std::string::npos) return Aborted(said);
  return Internal(said);
}

RedisConnection::RedisConnection(redisContext* context, const RedisOptions& options)
    : context_(context),
      address_(options.address.Describe()),
      command_timeout_(options.command_timeout) {}

RedisConnection::~RedisConnection() { redisFree(context_); }

StatusOr<std::unique_ptr<RedisConnection>> RedisConnection::Connect(const RedisOptions& options) {
  IgnoreSigpipe();
  redisContext* c = redisConnectWithTimeout(options.address.host.c_str(), options.address.port,
                                            ToTimeval(options.connect_timeout));
  if (c == nullptr) return Internal("redis: cannot allocate a connection context");
  std::unique_ptr<RedisConnection> conn(new RedisConnection(c, options));
  if (c->err != 0) return conn->IoError("connecting");
  MHA_RETURN_IF_ERROR(conn->SetTimeout(options.command_timeout));
  if (!options.password.empty()) {
    auto auth = conn->Command({"AUTH", options.password});
    if (!auth.ok()) return auth.status();  // the message names the reply, never the password
  }
  if (options.address.db > 0) {
    auto select = conn->Command({"SELECT", std::to_string(options.address.db)});
    if (!select.ok()) return select.status();
  }
  return conn;
}

Status RedisConnection::SetTimeout(std::chrono::milliseconds timeout) {
  if (redisSetTimeout(context_, ToTimeval(timeout)) != REDIS_OK) return IoError("setting timeouts");
  return Status::Ok();
}

Status RedisConnection::IoError(const std::string& doing) {
  broken_ = true;
  const std::string why = context_->errstr;
  const std::string where = "redis at " + address_ + ": " + doing + ": ";
  if (why.find("refused") != std::string::npos) {
    return Unavailable(where + "connection refused (is redis-server running there? --kv-store)");
  }
  if (why.find("timed out") != std::string::npos ||
      why.find("temporarily unavailable") != std::string::npos) {
    return DeadlineExceeded(where + "no answer within the timeout (--kv-store-timeout-ms " +
                            std::to_string(command_timeout_.count()) + ")");
  }
  if (context_->err == REDIS_ERR_EOF)
    return Unavailable(where + "the server closed the connection");
  return Unavailable(where + (why.empty() ? "I/O error" : why));
}

StatusOr<RedisReply> RedisConnection::Command(const RedisArgs& args,
                                              std::chrono::milliseconds timeout) {
  if (broken_) return Unavailable("redis at " + address_ + ": the connection is broken");
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  if (timeout.count() > 0) MHA_RETURN_IF_ERROR(SetTimeout(timeout));
  void* raw = redisCommandArgv(context_, static_cast<int>(argv.size()), argv.data(), lens.data());
  if (raw == nullptr) return IoError(args.empty() ? "a command" : args.front());
  auto reply = Take(static_cast<redisReply*>(raw), address_);
  if (timeout.count() > 0) MHA_RETURN_IF_ERROR(SetTimeout(command_timeout_));
  return reply;
}

StatusOr<std::vector<StatusOr<RedisReply>>> RedisConnection::Pipeline(
    const std::vector<RedisArgs>& commands) {
  for (const auto& args : commands) MHA_RETURN_IF_ERROR(Send(args));
  std::vector<StatusOr<RedisReply>> replies;
  for (size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(context_, &raw) != REDIS_OK || raw == nullptr) return IoError("a pipeline");
    replies.push_back(Take(static_cast<redisReply*>(raw), address_));
  }
  return replies;
}

Status RedisConnection::Send(const RedisArgs& args) {
  if (broken_) return Unavailable("redis at " + address_ + ": the connection is broken");
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  if (redisAppendCommandArgv(context_, static_cast<int>(argv.size()), argv.data(), lens.data()) !=
      REDIS_OK) {
    return IoError("queueing a command");
  }
  return Status::Ok();
}

StatusOr<RedisReply> RedisConnection::Read(bool unbounded) {
  if (broken_) return Unavailable("redis at " + address_ + ": the connection is broken");
  if (unbounded) MHA_RETURN_IF_ERROR(SetTimeout(std::chrono::milliseconds(0)));
  void* raw = nullptr;
  if (redisGetReply(context_, &raw) != REDIS_OK || raw == nullptr) return IoError("reading");
  return Take(static_cast<redisReply*>(raw), address_);
}

void RedisConnection::Interrupt() {
  if (context_->fd >= 0) shutdown(context_->fd, SHUT_RDWR);
}

}  // namespace mha::serve
