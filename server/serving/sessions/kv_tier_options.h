// The shared KV tier's flags (kv_tier.h; docs/configuration.md): apart from it so that the core's
// options (server_core_options.h) carry them without the Redis client's headers.
#pragma once

#include <cstdint>
#include <string>

#include "server/serving/sessions/redis/redis_options.h"

namespace mha::serve {

struct KvTierOptions {
  std::string url;                     // --kv-store; "" = off (sessions live in this process only)
  RedisPasswordSource password;        // --kv-store-password-file / --kv-store-password-env
  int64_t timeout_ms = 1000;           // --kv-store-timeout-ms: connect and each command
  int64_t lease_ms = 10000;            // --kv-store-lease-ms
  int64_t handover_timeout_ms = 5000;  // --kv-store-handover-timeout-ms
  bool write_behind = false;           // --kv-store-write-behind: each full block written at once
  int64_t write_queue = 4096;          // --kv-store-write-queue: jobs waiting at most
  bool required = false;               // --kv-store-required: unreachable at start fails the start
  std::string prefix = "mha:";         // --kv-store-prefix: every key and channel starts with it
  int64_t ttl_s = 600;                 // the sessions' idle timeout (--session-idle-timeout-s)
};

}  // namespace mha::serve
