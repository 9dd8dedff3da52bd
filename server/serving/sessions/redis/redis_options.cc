#include "server/serving/sessions/redis/redis_options.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "mha/text.h"

namespace mha::serve {
namespace {

constexpr char kScheme[] = "redis://";

bool AllDigits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// `text` as a number in [low, high], or -1 (digits only, at most 10 of them).
int64_t ParseBounded(const std::string& text, int64_t low, int64_t high) {
  if (!AllDigits(text) || text.size() > 10) return -1;
  const int64_t v = std::strtoll(text.c_str(), nullptr, 10);
  return v < low || v > high ? -1 : v;
}

bool PlainHost(const std::string& host) {
  if (host.empty()) return false;
  for (char c : host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// "host:port" (the host possibly "[v6]") into its parts; the error names what is wrong.
Status SplitHostPort(const std::string& flag, const std::string& authority, RedisAddress* out) {
  std::string host, port;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string::npos || close + 1 >= authority.size() ||
        authority[close + 1] != ':') {
      return InvalidArgument(flag + ": the IPv6 host must be '[address]:port'");
    }
    host = authority.substr(1, close - 1);
    port = authority.substr(close + 2);
    if (host.empty() || host.find_first_not_of("0123456789abcdefABCDEF:.") != std::string::npos) {
      return InvalidArgument(flag + ": host '[" + Abbreviate(host) + "]' is not an IPv6 address");
    }
  } else {
    const size_t colon = authority.rfind(':');
    if (colon == std::string::npos) {
      return InvalidArgument(flag + ": no port in '" + Abbreviate(authority) +
                             "' (redis://host:port[/db], e.g. redis://127.0.0.1:6379)");
    }
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
    if (!PlainHost(host)) {
      return InvalidArgument(flag + ": host '" + Abbreviate(host) +
                             "' is not a host name or address ([A-Za-z0-9.-], at least one)");
    }
  }
  const int64_t p = ParseBounded(port, 1, 65535);
  if (p < 0) {
    return InvalidArgument(flag + ": port '" + Abbreviate(port) + "' is not a number 1..65535");
  }
  out->host = host;
  out->port = static_cast<int>(p);
  return Status::Ok();
}

}  // namespace

std::string RedisAddress::Describe() const {
  const bool v6 = host.find(':') != std::string::npos;
  return std::string(kScheme) + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port) + "/" +
         std::to_string(db);
}

StatusOr<RedisAddress> ParseRedisUrl(const std::string& url, const std::string& flag) {
  const size_t scheme = std::strlen(kScheme);
  if (url.compare(0, scheme, kScheme) != 0) {
    return InvalidArgument(flag + ": '" + Abbreviate(url) +
                           "' does not start with redis:// (redis://host:port[/db])");
  }
  const std::string rest = url.substr(scheme);
  if (rest.find('@') != std::string::npos) {
    return InvalidArgument(flag +
                           ": a user or password in the URL is refused (it would be on the "
                           "command line): use --kv-store-password-file or "
                           "--kv-store-password-env");
  }
  if (rest.find_first_of("?#") != std::string::npos) {
    return InvalidArgument(flag + ": the URL has a query or fragment; only redis://host:port[/db]");
  }
  const size_t slash = rest.find('/');
  RedisAddress address;
  MHA_RETURN_IF_ERROR(SplitHostPort(flag, rest.substr(0, slash), &address));
  if (slash != std::string::npos) {
    const std::string db = rest.substr(slash + 1);
    const int64_t n = ParseBounded(db, 0, 2147483647);
    if (n < 0) {
      return InvalidArgument(flag + ": database '" + Abbreviate(db) +
                             "' is not a number 0..2147483647 (the part after host:port/)");
    }
    address.db = static_cast<int>(n);
  }
  return address;
}

StatusOr<std::string> LoadRedisPassword(const RedisPasswordSource& source) {
  if (!source.file.empty() && !source.env.empty()) {
    return InvalidArgument(
        "--kv-store-password-file and --kv-store-password-env: give at most one of them");
  }
  if (!source.env.empty()) {
    const char* value = std::getenv(source.env.c_str());
    if (value == nullptr || *value == '\0') {
      return InvalidArgument("--kv-store-password-env: the environment variable '" +
                             Abbreviate(source.env) + "' is unset or empty");
    }
    return std::string(value);
  }
  if (source.file.empty()) return std::string();
  std::ifstream in(source.file);
  if (!in) {
    return InvalidArgument("--kv-store-password-file: cannot read '" + Abbreviate(source.file) +
                           "': " + std::strerror(errno));
  }
  std::string line;
  std::getline(in, line);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.empty()) {
    return InvalidArgument("--kv-store-password-file: '" + Abbreviate(source.file) +
                           "' is empty (the password is its first line)");
  }
  return line;
}

}  // namespace mha::serve
