#include "server/serving/sessions/redis/redis_leases.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "mha/text.h"

namespace mha::serve {
namespace {

// How often a release request that reached no subscriber is sent again.
constexpr std::chrono::milliseconds kAskAgain{100};

// KEYS: lease, fence. ARGV: owner, lease ms. {1, value} when taken (a new token when free, the
// same when this owner holds it); {0, value, pttl} when another owner holds it.
constexpr char kAcquire[] = R"lua(
local cur = redis.call('GET', KEYS[1])
if cur then
  local sp = string.find(cur, ' ', 1, true)
  if sp and string.sub(cur, 1, sp - 1) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, cur, 0}
  end
  return {0, cur, redis.call('PTTL', KEYS[1])}
end
local value = ARGV[1] .. ' ' .. redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
return {1, value, 0}
)lua";

// KEYS: lease, owner (who wrote the record last). ARGV: value, lease ms. A lease that is gone
// (expired while Redis was unreachable, or Redis restarted empty) is taken again when nobody wrote
// the session's record since: its holder is still the only one that has the session.
constexpr char kRenew[] = R"lua(
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if not cur then
  local writer = redis.call('GET', KEYS[2])
  if not writer or writer == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return 2
  end
end
return redis.error_reply('FENCED the lease is not held by this owner any more')
)lua";

// KEYS: lease, released. ARGV: value. 1 when released, 0 when it was not this lease.
constexpr char kRelease[] = R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('RPUSH', KEYS[2], '1')
redis.call('PEXPIRE', KEYS[2], 60000)
return 1
)lua";

// "owner token" into its parts.
bool SplitValue(const std::string& value, std::string* owner, int64_t* token) {
  const size_t sp = value.rfind(' ');
  if (sp == std::string::npos) return false;
  *owner = value.substr(0, sp);
  *token = std::strtoll(value.c_str() + sp + 1, nullptr, 10);
  return *token > 0;
}

StatusOr<LeaseAttempt> ParseAttempt(const std::string& session, const RedisReply& r) {
  if (r.type != RedisReply::Type::kArray || r.elements.size() != 3 ||
      r.elements[1].type != RedisReply::Type::kString) {
    return Internal("redis: the lease script answered an unexpected reply");
  }
  LeaseAttempt a;
  a.acquired = r.elements[0].integer == 1;
  std::string owner;
  int64_t token = 0;
  if (!SplitValue(r.elements[1].str, &owner, &token)) {
    return DataLoss("session '" + Abbreviate(session) + "': its lease '" +
                    Abbreviate(r.elements[1].str) + "' is malformed");
  }
  if (a.acquired) {
    a.lease = SessionLease{session, owner, token};
  } else {
    a.holder = owner;
    a.holder_token = token;
    a.expires_in = std::chrono::milliseconds(std::max<long long>(0, r.elements[2].integer));
  }
  return a;
}

}  // namespace

std::string NewOwnerId() {
  char host[64] = {};
  gethostname(host, sizeof(host) - 1);
  std::string name = host;
  for (char& c : name) {
    if (c == ' ') c = '_';
  }
  std::random_device rd;
  char tail[24];
  std::snprintf(tail, sizeof(tail), "%08x", static_cast<unsigned>(rd()));
  return name + "-" + std::to_string(::getpid()) + "-" + tail;
}

RedisLeases::RedisLeases(std::shared_ptr<RedisClient> client, RedisLeaseOptions options)
    : client_(std::move(client)), options_(std::move(options)) {}

StatusOr<LeaseAttempt> RedisLeases::TryAcquire(const std::string& session) {
  auto reply = client_->Eval(kAcquire, {LeaseKey(session), options_.prefix + "fence"},
                             {options_.owner, std::to_string(options_.lease.count())});
  if (!reply.ok()) return reply.status();
  return ParseAttempt(session, *reply);
}

StatusOr<bool> RedisLeases::Held(const std::string& session) {
  auto reply = client_->Command({"EXISTS", LeaseKey(session)});
  if (!reply.ok()) return reply.status();
  return reply->integer == 1;
}

StatusOr<SessionLease> RedisLeases::Acquire(const std::string& session) {
  const auto deadline = std::chrono::steady_clock::now() + options_.handover;
  bool heard = false;
  for (;;) {
    auto attempt = TryAcquire(session);
    if (!attempt.ok()) return attempt.status();
    if (attempt->acquired) return attempt->lease;
    // Asked again until a subscriber hears it (PUBLISH answers how many did): a request sent while
    // the holder's release listener is not subscribed (it is starting, or reconnecting) is lost.
    if (!heard) {
      auto sent = client_->Command({"PUBLISH", Channel(attempt->holder), session});
      if (!sent.ok()) return sent.status();
      heard = sent->integer > 0;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return Unavailable("session '" + Abbreviate(session) + "' is held by replica '" +
                         Abbreviate(attempt->holder) + "' (lease token " +
                         std::to_string(attempt->holder_token) +
                         "), which did not release it within --kv-store-handover-timeout-ms " +
                         std::to_string(options_.handover.count()) + "; its lease expires in " +
                         std::to_string(attempt->expires_in.count()) + " ms: retry then");
    }
    // Woken by a release; else at most until the lease expires (+1 ms), the bound, or the next ask.
    auto wait = std::min(left, attempt->expires_in + std::chrono::milliseconds(1));
    if (!heard) wait = std::min(wait, kAskAgain);
    MHA_RETURN_IF_ERROR(WaitForRelease(session, std::max(wait, std::chrono::milliseconds(1))));
  }
}

Status RedisLeases::WaitForRelease(const std::string& session, std::chrono::milliseconds wait) {
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.3f", static_cast<double>(wait.count()) / 1000.0);
  auto reply = client_->Command({"BLPOP", ReleasedKey(session), seconds},
                                wait + client_->options().command_timeout);
  return reply.ok() ? Status::Ok() : reply.status();
}

Status RedisLeases::Renew(const SessionLease& lease) {
  auto reply = client_->Eval(kRenew, {LeaseKey(lease.session), OwnerKey(lease.session)},
                             {lease.value(), std::to_string(options_.lease.count())});
  return reply.ok() ? Status::Ok() : reply.status();
}

StatusOr<std::vector<Status>> RedisLeases::RenewAll(const std::vector<SessionLease>& leases) {
  std::vector<RedisArgs> commands;
  commands.reserve(leases.size());
  for (const auto& l : leases) {
    commands.push_back({"EVAL", kRenew, "2", LeaseKey(l.session), OwnerKey(l.session), l.value(),
                        std::to_string(options_.lease.count())});
  }
  auto replies = client_->Pipeline(commands);
  if (!replies.ok()) return replies.status();
  std::vector<Status> out;
  for (const auto& r : *replies) out.push_back(r.ok() ? Status::Ok() : r.status());
  return out;
}

Status RedisLeases::Release(const SessionLease& lease) {
  auto reply = client_->Eval(kRelease, {LeaseKey(lease.session), ReleasedKey(lease.session)},
                             {lease.value()});
  if (!reply.ok()) return reply.status();
  if (reply->integer != 1) {
    return Aborted("session '" + Abbreviate(lease.session) + "': lease token " +
                   std::to_string(lease.token) + " is not held by this replica any more");
  }
  return Status::Ok();
}

}  // namespace mha::serve
