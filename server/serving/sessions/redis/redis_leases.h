// Ownership of sessions in the shared KV store: one replica holds a session at a time, through a
// lease in Redis ("<prefix>lease:<session>" = "<owner> <token>", expiring after lease_ms unless
// renewed). The token is a fencing token: INCR of "<prefix>fence" at each acquisition, so every
// ownership has its own, and every write of the session's record is compared against the lease
// (RedisKvStore): a replica that lost its lease can never write into the session's history.
//
// Acquire, release and renew are Lua scripts (atomic in Redis). A replica that needs a session
// another replica holds asks that replica to release it (PUBLISH on "<prefix>release:<owner>",
// which the holder's ReleaseListener receives) and waits, bounded, for the release (the holder
// RPUSHes "<prefix>released:<session>", the waiter BLPOPs it) or for the lease to expire (a
// holder that is gone has no subscriber: PUBLISH reaches nobody, and its lease runs out). Until a
// subscriber hears it, the request is sent again every 100 ms: one sent while the holder's
// listener was not subscribed yet (or was reconnecting) reached nobody.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mha/status.h"
#include "server/serving/sessions/redis/redis_client.h"

namespace mha::serve {

struct SessionLease {
  std::string session;
  std::string owner;
  int64_t token = 0;
  std::string value() const { return owner + " " + std::to_string(token); }
};

// One try at a lease: taken (then `lease`), or held by `holder` for `expires_in` more.
struct LeaseAttempt {
  bool acquired = false;
  SessionLease lease;
  std::string holder;  // the holder's owner id
  int64_t holder_token = 0;
  std::chrono::milliseconds expires_in{0};
};

struct RedisLeaseOptions {
  std::string prefix = "mha:";
  std::string owner;                         // this replica's id (unique per process)
  std::chrono::milliseconds lease{10000};    // --kv-store-lease-ms
  std::chrono::milliseconds handover{5000};  // --kv-store-handover-timeout-ms
};

class RedisLeases {
 public:
  RedisLeases(std::shared_ptr<RedisClient> client, RedisLeaseOptions options);

  // Takes the lease of `session` when nobody holds it (a new token) or this owner does (its
  // token, the lease renewed).
  StatusOr<LeaseAttempt> TryAcquire(const std::string& session);
  // TryAcquire; when another replica holds it, asks it to release the session and waits for the
  // release or the lease's expiry, at most options.handover. UNAVAILABLE naming the holder, the
  // bound and when its lease expires if neither happens in time.
  StatusOr<SessionLease> Acquire(const std::string& session);
  // Extends the lease (takes it again when it is gone and nobody wrote the session since);
  // ABORTED (FENCED) when another replica holds it or wrote the session since.
  Status Renew(const SessionLease& lease);
  // Renew of each lease in one round trip: a Status per lease, in order; the outer Status is an
  // I/O failure.
  StatusOr<std::vector<Status>> RenewAll(const std::vector<SessionLease>& leases);
  // Gives the lease up (when it is still this lease) and wakes a replica waiting for it.
  Status Release(const SessionLease& lease);
  // Whether some replica holds the lease of `session` now.
  StatusOr<bool> Held(const std::string& session);

  std::string Channel(const std::string& owner) const {
    return options_.prefix + "release:" + owner;
  }
  const RedisLeaseOptions& options() const { return options_; }

 private:
  std::string LeaseKey(const std::string& s) const { return options_.prefix + "lease:" + s; }
  // Who wrote the session's record last (RedisKvStore's scripts keep it).
  std::string OwnerKey(const std::string& s) const { return options_.prefix + "owner:" + s; }
  std::string ReleasedKey(const std::string& s) const { return options_.prefix + "released:" + s; }
  // Waits up to `wait` for a release of `session` (BLPOP); OK on a release or the time running
  // out, the store's error otherwise.
  Status WaitForRelease(const std::string& session, std::chrono::milliseconds wait);

  const std::shared_ptr<RedisClient> client_;
  const RedisLeaseOptions options_;
};

// A replica's owner id: host name, process id and a random part ("host-1234-9f2c...").
std::string NewOwnerId();

}  // namespace mha::serve
