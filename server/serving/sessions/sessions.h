// Sessions: the decoding-session capability of a served model version (docs/sessions.md), as
// ServerCore calls it: open a session (the kind's own checks and cache), close, fork and truncate
// one, and the version's usage. A kind that keeps sessions returns its SessionStore
// (session_store.h) from ServedModel::sessions(): close, fork, truncate and usage are the store's,
// the same for every kind; Open is the kind's. Ids are checked and unique server-wide by the
// caller (ServerCore and the SessionDirectory).
#pragma once

#include <cstdint>
#include <string>

#include "mha/status.h"
#include "server/serving/caller_thread.h"
#include "server/serving/inference.h"

namespace mha::serve {

// What a session holds, as the session calls answer it.
struct SessionInfo {
  std::string id;
  bool cross = false;
  int64_t batch_size = 0, max_tokens = 0;
  int64_t tokens = 0;         // decoded per row so far
  int64_t blocks = 0;         // KV blocks held
  int64_t shared_blocks = 0;  // of those, held by another session too (a fork's)
  int64_t block_tokens = 0;
};

// The sessions of one version and its KV pool.
struct SessionUsage {
  int64_t sessions = 0, blocks_used = 0, blocks_total = 0, block_bytes = 0;
};

class Sessions {
 public:
  virtual ~Sessions() = default;

  // A new session on this version (request.model / model_version resolved by the caller): the
  // kind's checks (INVALID_ARGUMENT / RESOURCE_EXHAUSTED naming the field), then its cache's first
  // blocks (RESOURCE_EXHAUSTED when the pool is full). A projection or a spill blocks `caller`.
  virtual StatusOr<SessionInfo> Open(const OpenSessionRequest& request, CallerThread& caller) = 0;
  // Ends session `id`: its info as it closed (the blocks it held), NOT_FOUND with the directory's
  // reason. Its blocks go back now, or after the step holding it; steps waiting for it are
  // answered NOT_FOUND.
  virtual StatusOr<SessionInfo> Close(const std::string& id) = 0;
  // A new session (`new_id`, "" = NewSessionId()) holding the first `tokens` tokens (0 = all) of
  // session `id`, sharing its blocks. NOT_FOUND; FAILED_PRECONDITION while a step holds it or when
  // the kind cannot fork it there; INVALID_ARGUMENT / OUT_OF_RANGE for tokens. A restore of the
  // spilled source, or a spill to make room, blocks `caller`.
  virtual StatusOr<SessionInfo> Fork(const std::string& id, int64_t tokens,
                                     const std::string& new_id, CallerThread& caller) = 0;
  // Keeps the first `tokens` tokens of session `id`, giving whole blocks back. Refusals as Fork's.
  virtual StatusOr<SessionInfo> Truncate(const std::string& id, int64_t tokens,
                                         CallerThread& caller) = 0;
  virtual SessionUsage usage() const = 0;

  // The shared KV tier (--kv-store; docs/scale-out.md). A kind without it keeps these defaults.
  // Before Open or Fork registers `id`: its ownership in the store (ALREADY_EXISTS when another
  // replica holds it); Unclaim when the Open or Fork then failed.
  virtual Status Claim(const std::string& id) { return Status::Ok(); }
  virtual void Unclaim(const std::string& id) {}
  // Session `id`, not open here, taken over from the store: its owner asked to release it (or its
  // lease expired), its record checked, its blocks restored exactly, registered here. NOT_FOUND
  // when the store has no record; DATA_LOSS naming the session for a record or block that is
  // malformed, of another model version or dtype, or the wrong size; UNAVAILABLE when its owner
  // did not release it in time.
  virtual Status Adopt(const std::string& id, CallerThread& caller) {
    return Unimplemented("no shared KV store");
  }
  // Ends the sessions idle longer than --session-idle-timeout-s (every call above does too).
  virtual void SweepExpired() = 0;
};

}  // namespace mha::serve
