// One connection to Redis over hiredis (synchronous): connected within a bound, every command
// answered or failed within a bound, logged in (AUTH) and on its database (SELECT). Errors come
// back as a Status that names the server and says what to do: a refused connection is
// UNAVAILABLE, no answer in time DEADLINE_EXCEEDED, a refused password UNAUTHENTICATED, a write
// refused at maxmemory RESOURCE_EXHAUSTED. After an I/O error or a timeout the connection is
// broken() for good (hiredis cannot resume a half-read reply): the caller makes a new one
// (RedisClient does). Not thread-safe, except Interrupt.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "mha/status.h"
#include "server/serving/sessions/redis/redis_options.h"

struct redisContext;

namespace mha::serve {

// One reply, owned (hiredis's redisReply copied).
struct RedisReply {
  enum class Type { kNil, kString, kStatus, kInteger, kArray };
  Type type = Type::kNil;
  std::string str;                   // kString, kStatus
  long long integer = 0;             // kInteger
  std::vector<RedisReply> elements;  // kArray
};

using RedisArgs = std::vector<std::string>;

class RedisConnection {
 public:
  // Connects within options.connect_timeout, then AUTH (when a password is set) and SELECT (db >
  // 0). UNAVAILABLE / DEADLINE_EXCEEDED / UNAUTHENTICATED naming the address; the password never
  // appears in a message.
  static StatusOr<std::unique_ptr<RedisConnection>> Connect(const RedisOptions& options);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // One command (binary-safe arguments) and its reply; an error reply as its Status
  // (RedisErrorStatus). `timeout` > 0 replaces the command timeout for this call (a blocking
  // command such as BLPOP waits that long).
  StatusOr<RedisReply> Command(const RedisArgs& args,
                               std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // Several commands in one round trip: every reply (or its error) in order. The outer Status is
  // an I/O failure (the connection is then broken).
  StatusOr<std::vector<StatusOr<RedisReply>>> Pipeline(const std::vector<RedisArgs>& commands);
  // A subscriber's half: sends without reading, then reads one reply at a time (blocking without a
  // bound until a message comes, Interrupt, or the connection ends).
  Status Send(const RedisArgs& args);
  StatusOr<RedisReply> Read(bool unbounded);

  // From another thread: a Read blocked on this connection returns UNAVAILABLE (the socket is shut
  // down; the connection is broken).
  void Interrupt();
  bool broken() const { return broken_; }
  const std::string& address() const { return address_; }

 private:
  RedisConnection(redisContext* context, const RedisOptions& options);
  // The Status of the context's I/O error; marks the connection broken.
  Status IoError(const std::string& doing);
  Status SetTimeout(std::chrono::milliseconds timeout);

  redisContext* context_;
  const std::string address_;
  const std::chrono::milliseconds command_timeout_;
  bool broken_ = false;
};

// The Status of an error reply from `address`: NOAUTH / WRONGPASS -> UNAUTHENTICATED, OOM ->
// RESOURCE_EXHAUSTED (maxmemory), LOADING / BUSY / MASTERDOWN / READONLY / TRYAGAIN ->
// UNAVAILABLE, FENCED (the store's scripts: an ownership lost) -> ABORTED, others INTERNAL.
Status RedisErrorStatus(const std::string& address, const std::string& error);

}  // namespace mha::serve
