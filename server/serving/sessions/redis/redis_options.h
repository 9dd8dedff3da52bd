// Where the shared KV session store lives and how to log in (--kv-store redis://host:port[/db],
// the password from a file or an environment variable: never on the command line, never logged).
// Torch-free and hiredis-free: the flag parsing and its errors only.
#pragma once

#include <chrono>
#include <string>

#include "mha/status.h"

namespace mha::serve {

struct RedisAddress {
  std::string host;
  int port = 0;
  int db = 0;
  std::string Describe() const;  // "redis://host:port/db" (no password: there is none in it)
};

// "redis://host:port" or "redis://host:port/db", strictly: the scheme, a host of
// [A-Za-z0-9.-] (or an IPv6 address in brackets), a port 1..65535 and a database 0..2^31-1, all
// digits. A password in the URL ("redis://:secret@host") is refused: it would be on the command
// line. INVALID_ARGUMENT naming `flag` and the part that is wrong.
StatusOr<RedisAddress> ParseRedisUrl(const std::string& url,
                                     const std::string& flag = "--kv-store");

// Where the password comes from: at most one of a file (its first line; a trailing newline and
// carriage return dropped) and an environment variable. Neither: no AUTH.
struct RedisPasswordSource {
  std::string file;  // --kv-store-password-file
  std::string env;   // --kv-store-password-env: the variable's name
};

// The password, "" for none. INVALID_ARGUMENT naming the flag when both are given, the file
// cannot be read (the system's reason) or is empty, or the variable is unset or empty. The
// password itself never appears in a message.
StatusOr<std::string> LoadRedisPassword(const RedisPasswordSource& source);

struct RedisOptions {
  RedisAddress address;
  std::string password;                             // "" = no AUTH
  std::chrono::milliseconds connect_timeout{1000};  // --kv-store-timeout-ms
  std::chrono::milliseconds command_timeout{1000};  // --kv-store-timeout-ms
};

}  // namespace mha::serve
