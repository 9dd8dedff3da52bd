#include "server/serving/sessions/redis/redis_kv_store.h"

#include <set>

#include "mha/text.h"

namespace mha::serve {
namespace {

// Sets a key's TTL to at least ARGV[3] ms (ttl 0: no expiry). Shared by the scripts below.
constexpr char kExtend[] = R"lua(
local function extend(key, ttl)
  if ttl > 0 then
    local left = redis.call('PTTL', key)
    if left >= 0 and left < ttl then redis.call('PEXPIRE', key, ttl) end
  end
end
local function drop(prefix, session, block)
  local ref = prefix .. 'ref:' .. block
  redis.call('SREM', ref, session)
  if redis.call('SCARD', ref) == 0 then redis.call('DEL', ref, prefix .. 'blk:' .. block) end
end
)lua";

// KEYS: lease, record. ARGV: lease value, record, ttl ms, session, prefix, n named, named...,
// dropped... Every named block must exist.
constexpr char kWriteRecord[] = R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('FENCED the session is held by another replica')
end
local ttl, prefix, session = tonumber(ARGV[3]), ARGV[5], ARGV[4]
local named = tonumber(ARGV[6])
for i = 7, 6 + named do
  if redis.call('EXISTS', prefix .. 'blk:' .. ARGV[i]) == 0 then
    return redis.error_reply('MISSING block ' .. ARGV[i] .. ' is not in the store')
  end
end
local owner = prefix .. 'owner:' .. session
if ttl > 0 then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ttl)
  redis.call('SET', owner, ARGV[1], 'PX', ttl)
else
  redis.call('SET', KEYS[2], ARGV[2])
  redis.call('SET', owner, ARGV[1])
end
for i = 7, 6 + named do
  local ref = prefix .. 'ref:' .. ARGV[i]
  redis.call('SADD', ref, session)
  if ttl > 0 and redis.call('PTTL', ref) == -1 then redis.call('PEXPIRE', ref, ttl) end
  extend(ref, ttl)
  extend(prefix .. 'blk:' .. ARGV[i], ttl)
end
for i = 7 + named, #ARGV do drop(prefix, session, ARGV[i]) end
return 1
)lua";

// KEYS: lease, record. ARGV: lease value, session, prefix, blocks...
constexpr char kRemove[] = R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('FENCED the session is held by another replica')
end
redis.call('DEL', KEYS[1], KEYS[2], ARGV[3] .. 'owner:' .. ARGV[2])
for i = 4, #ARGV do drop(ARGV[3], ARGV[2], ARGV[i]) end
return 1
)lua";

}  // namespace

RedisKvStore::RedisKvStore(std::shared_ptr<RedisClient> client, RedisKvStoreOptions options)
    : client_(std::move(client)), options_(std::move(options)) {}

std::string RedisKvStore::NewBlockKey(const std::string& session, int64_t token) {
  return session + "." + std::to_string(token) + "." + std::to_string(next_block_++);
}

Status RedisKvStore::PutBlock(const std::string& key, const void* data, int64_t bytes) {
  RedisArgs args = {"SET", BlockKey(key),
                    std::string(static_cast<const char*>(data), static_cast<size_t>(bytes))};
  if (options_.ttl.count() > 0) {
    args.insert(args.end(), {"PX", std::to_string(options_.ttl.count())});
  }
  auto reply = client_->Command(args);
  return CountWrite(reply.ok() ? Status::Ok() : reply.status(), 1, bytes, 0);
}

Status RedisKvStore::CountWrite(Status status, int64_t blocks, int64_t bytes, int64_t records) {
  if (status.ok()) {
    blocks_written_ += blocks;
    bytes_written_ += bytes;
    records_written_ += records;
  } else if (status.code() == StatusCode::kResourceExhausted) {
    ++refused_full_;
  } else {
    ++failed_;
  }
  return status;
}

RedisKvStoreCounters RedisKvStore::counters() const {
  RedisKvStoreCounters c;
  c.blocks_written = blocks_written_;
  c.bytes_written = bytes_written_;
  c.records_written = records_written_;
  c.blocks_read = blocks_read_;
  c.bytes_read = bytes_read_;
  c.refused_full = refused_full_;
  c.failed = failed_;
  return c;
}

StatusOr<std::string> RedisKvStore::CheckBlock(const std::string& session, const std::string& key,
                                               int64_t bytes, StatusOr<RedisReply> reply) {
  if (!reply.ok()) return reply.status();
  const std::string who = "session '" + Abbreviate(session) + "': its block '" + Abbreviate(key);
  if (reply->type != RedisReply::Type::kString) {
    return DataLoss(who + "' is not in the store (expired or evicted)");
  }
  if (static_cast<int64_t>(reply->str.size()) != bytes) {
    return DataLoss(who + "' holds " + std::to_string(reply->str.size()) + " bytes, its record " +
                    "says " + std::to_string(bytes));
  }
  ++blocks_read_;
  bytes_read_ += bytes;
  return std::move(reply->str);
}

StatusOr<std::string> RedisKvStore::GetBlock(const std::string& session, const std::string& key,
                                             int64_t bytes) {
  return CheckBlock(session, key, bytes, client_->Command({"GET", BlockKey(key)}));
}

StatusOr<std::vector<std::string>> RedisKvStore::GetBlocks(const std::string& session,
                                                           const std::vector<std::string>& keys,
                                                           const std::vector<int64_t>& bytes) {
  std::vector<RedisArgs> commands;
  commands.reserve(keys.size());
  for (const auto& key : keys) commands.push_back({"GET", BlockKey(key)});
  auto replies = client_->Pipeline(commands);
  if (!replies.ok()) return replies.status();
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto block = CheckBlock(session, keys[i], bytes[i], std::move((*replies)[i]));
    if (!block.ok()) return block.status();
    out.push_back(std::move(block.value()));
  }
  return out;
}

Status RedisKvStore::PutBlocks(const std::vector<std::pair<std::string, std::string>>& blocks) {
  std::vector<RedisArgs> commands;
  commands.reserve(blocks.size());
  int64_t bytes = 0;
  for (const auto& [key, data] : blocks) {
    commands.push_back({"SET", BlockKey(key), data});
    if (options_.ttl.count() > 0) {
      commands.back().insert(commands.back().end(), {"PX", std::to_string(options_.ttl.count())});
    }
    bytes += static_cast<int64_t>(data.size());
  }
  auto replies = client_->Pipeline(commands);
  if (!replies.ok()) return CountWrite(replies.status(), 0, 0, 0);
  for (const auto& r : *replies) {
    if (!r.ok()) return CountWrite(r.status(), 0, 0, 0);
  }
  return CountWrite(Status::Ok(), static_cast<int64_t>(blocks.size()), bytes, 0);
}

Status RedisKvStore::WriteRecord(const SessionLease& lease, const SessionRecord& record,
                                 const std::vector<std::string>& dropped) {
  const std::vector<std::string> named = SessionRecordBlocks(record);
  RedisArgs args = {lease.value(),
                    EncodeSessionRecord(record),
                    std::to_string(options_.ttl.count()),
                    record.session_id,
                    options_.prefix,
                    std::to_string(named.size())};
  args.insert(args.end(), named.begin(), named.end());
  args.insert(args.end(), dropped.begin(), dropped.end());
  auto reply = client_->Eval(std::string(kExtend) + kWriteRecord,
                             {LeaseKey(record.session_id), RecordKey(record.session_id)}, args);
  if (reply.ok()) return CountWrite(Status::Ok(), 0, 0, 1);
  if (reply.status().message().find("MISSING") != std::string::npos) {
    return CountWrite(
        DataLoss("session '" + Abbreviate(record.session_id) +
                 "': a block its record names is not in the store: " + reply.status().message()),
        0, 0, 0);
  }
  return CountWrite(reply.status(), 0, 0, 0);
}

StatusOr<std::string> RedisKvStore::ReadRecord(const std::string& session) {
  auto reply = client_->Command({"GET", RecordKey(session)});
  if (!reply.ok()) return reply.status();
  if (reply->type != RedisReply::Type::kString) {
    return NotFound("session '" + Abbreviate(session) + "' has no record in the KV store");
  }
  return std::move(reply->str);
}

StatusOr<bool> RedisKvStore::HasRecord(const std::string& session) {
  auto reply = client_->Command({"EXISTS", RecordKey(session)});
  if (!reply.ok()) return reply.status();
  return reply->integer == 1;
}

Status RedisKvStore::RemoveSession(const SessionLease& lease,
                                   const std::vector<std::string>& blocks) {
  RedisArgs args = {lease.value(), lease.session, options_.prefix};
  std::set<std::string> seen;
  for (const auto& b : blocks) {
    if (seen.insert(b).second) args.push_back(b);
  }
  auto reply = client_->Eval(std::string(kExtend) + kRemove,
                             {LeaseKey(lease.session), RecordKey(lease.session)}, args);
  return CountWrite(reply.ok() ? Status::Ok() : reply.status(), 0, 0, 0);
}

}  // namespace mha::serve
