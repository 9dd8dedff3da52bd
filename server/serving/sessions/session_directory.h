// Which model version holds each open decoding session, and why an ended one ended. One per
// ServerCore: a step names only its session_id, the directory finds the version's SessionStore.
// Ended sessions leave a tombstone (the most recent kMaxTombstones) so that a late request gets
// NOT_FOUND saying why: closed, evicted, expired, or its model version unloaded.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "mha/status.h"

namespace mha::serve {

struct SessionLocation {
  std::string model, version;
  std::string fingerprint = {};  // the version's weights (repository/fingerprint.h); "" = unknown
};

class SessionDirectory {
 public:
  static constexpr size_t kMaxTombstones = 65536;

  // Records an open session; ALREADY_EXISTS when `id` is open already (a tombstone is replaced:
  // a client may re-open the id of a session that ended here).
  Status Add(const std::string& id, SessionLocation where);
  // The session ended: later lookups get NOT_FOUND "session 'id' <why>". `restorable`: it left
  // for the shared KV store (handed over, its lease taken), so another call may restore it.
  void End(const std::string& id, const std::string& why, bool restorable = false);
  // Where the session lives, or NOT_FOUND naming why it is not there.
  StatusOr<SessionLocation> Find(const std::string& id) const;
  // NOT_FOUND for `id`: its tombstone's reason, or "unknown" (never opened, or before a restart).
  Status NotFoundFor(const std::string& id) const;
  int64_t open_count() const;
  // Whether a call for `id`, not open here, may look for it in the shared KV store: never seen
  // here (or before a restart), or ended restorable. A session closed, expired or evicted here
  // may not (its removal from the store may still be queued).
  bool Restorable(const std::string& id) const;

 private:
  Status NotFoundLocked(const std::string& id) const;

  mutable std::mutex mu_;
  std::unordered_map<std::string, SessionLocation> open_;
  std::unordered_map<std::string, std::string> ended_;  // id -> why
  std::unordered_map<std::string, bool> restorable_;    // id -> ended restorable (of ended_)
  std::deque<std::string> ended_order_;                 // oldest first, bounded
};

// A fresh session id: "s-" + 32 hex digits from a random 128-bit number.
std::string NewSessionId();

inline constexpr size_t kMaxSessionIdLength = 128;
// A session id as a client may choose it (and as every request names one): 1 to 128 characters
// of [A-Za-z0-9._:-]. INVALID_ARGUMENT naming `field`, the length or the first bad character.
Status CheckSessionId(const std::string& id, const char* field = "session_id");

}  // namespace mha::serve
