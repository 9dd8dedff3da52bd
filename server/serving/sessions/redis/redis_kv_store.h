// The sessions' keys and values in Redis: each session's record ("<prefix>rec:<session>",
// session_record.h) and its blocks ("<prefix>blk:<key>", the bytes of one block of one layer).
//
// Blocks are stored once however many sessions hold them: a fork's record names its source's
// blocks for the tokens they share, and each block has a set of the sessions whose records name it
// ("<prefix>ref:<key>"). A record write adds the session to the sets of the blocks it names and
// takes it out of those it names no more; a block whose set empties is deleted with it (a session
// closed, truncated, or its block rewritten). Block keys are never reused: "<session>.<token>.<n>"
// (the writer's fencing token and a counter), so a block, once written, never changes.
//
// Every record write and removal is fenced: a Lua script that compares the session's lease with
// the writer's (redis_leases.h) before it writes; ABORTED when the lease is another's. A write
// also notes its writer ("<prefix>owner:<session>"), so that a lease lost while Redis was away is
// taken back only by the replica that wrote the session last.
//
// TTLs follow --session-idle-timeout-s: the record, the blocks it names and their sets expire
// `ttl` after the session's last write (each write extends every one of them to at least that), so
// a session nobody closes leaves nothing behind; ttl 0 = they never expire.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mha/status.h"
#include "server/serving/sessions/redis/redis_client.h"
#include "server/serving/sessions/redis/redis_leases.h"
#include "server/serving/sessions/redis/session_record.h"

namespace mha::serve {

// What the store did since it was made (for /metrics).
struct RedisKvStoreCounters {
  int64_t blocks_written = 0, bytes_written = 0, records_written = 0;
  int64_t blocks_read = 0, bytes_read = 0;
  int64_t refused_full = 0;  // writes refused at maxmemory (RESOURCE_EXHAUSTED)
  int64_t failed = 0;        // other failed writes (unreachable, timeouts, fenced)
};

struct RedisKvStoreOptions {
  std::string prefix = "mha:";
  std::chrono::milliseconds ttl{600000};  // --session-idle-timeout-s; 0 = no expiry
};

class RedisKvStore {
 public:
  RedisKvStore(std::shared_ptr<RedisClient> client, RedisKvStoreOptions options);

  // A block key never used before: "<session>.<token>.<n>".
  std::string NewBlockKey(const std::string& session, int64_t token);
  // Stores `bytes` bytes under block `key` (with the TTL). RESOURCE_EXHAUSTED at maxmemory.
  Status PutBlock(const std::string& key, const void* data, int64_t bytes);
  // The bytes of block `key` of session `session`: DATA_LOSS naming the session when the block is
  // missing or holds another number of bytes than `bytes`.
  StatusOr<std::string> GetBlock(const std::string& session, const std::string& key, int64_t bytes);
  // PutBlock / GetBlock of several blocks in one round trip (keys[i] holds bytes[i] bytes).
  Status PutBlocks(const std::vector<std::pair<std::string, std::string>>& blocks);
  StatusOr<std::vector<std::string>> GetBlocks(const std::string& session,
                                               const std::vector<std::string>& keys,
                                               const std::vector<int64_t>& bytes);
  // Writes `record` under `lease` (fenced: ABORTED when the lease is another's), names its blocks'
  // sets and drops the session from `dropped` blocks' (deleting those nobody names). DATA_LOSS
  // when a block it names is not in the store (never written, or expired).
  Status WriteRecord(const SessionLease& lease, const SessionRecord& record,
                     const std::vector<std::string>& dropped);
  // The record's text; NOT_FOUND when the store has none for `session`.
  StatusOr<std::string> ReadRecord(const std::string& session);
  // Ends the session in the store under `lease` (fenced): its record and lease go, its blocks'
  // sets lose it (`blocks`: every block key it named), and blocks nobody names are deleted.
  Status RemoveSession(const SessionLease& lease, const std::vector<std::string>& blocks);
  // Whether `session` has a record (a replica that has never seen it may restore it).
  StatusOr<bool> HasRecord(const std::string& session);

  RedisKvStoreCounters counters() const;
  const RedisKvStoreOptions& options() const { return options_; }
  std::string RecordKey(const std::string& s) const { return options_.prefix + "rec:" + s; }
  std::string BlockKey(const std::string& k) const { return options_.prefix + "blk:" + k; }
  std::string LeaseKey(const std::string& s) const { return options_.prefix + "lease:" + s; }

 private:
  // A GET's reply as block `key` of `session` of `bytes` bytes, or its DATA_LOSS.
  StatusOr<std::string> CheckBlock(const std::string& session, const std::string& key,
                                   int64_t bytes, StatusOr<RedisReply> reply);
  // Counts a write's outcome; returns it.
  Status CountWrite(Status status, int64_t blocks, int64_t bytes, int64_t records);

  const std::shared_ptr<RedisClient> client_;
  const RedisKvStoreOptions options_;
  std::atomic<int64_t> next_block_{0};
  std::atomic<int64_t> blocks_written_{0}, bytes_written_{0}, records_written_{0};
  std::atomic<int64_t> blocks_read_{0}, bytes_read_{0}, refused_full_{0}, failed_{0};
};

}  // namespace mha::serve
