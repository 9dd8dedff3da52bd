// What both session kinds share for branching sessions: the version's spill store under
// --kv-cache-full-policy spill, the startup check of --kv-spill-dir, and the checks of a fork's or
// a truncate's token count.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mha/kv_spill.h"
#include "mha/status.h"
#include "server/serving/sessions/session_directory.h"
#include "server/serving/sessions/session_options.h"

namespace mha::serve {

// The spill store of one model version: for a pool on the CPU, files in a new subdirectory of
// options.spill_dir named after the version (removed with the store, once nothing holds it); for a
// pool on a GPU, host memory; both bounded by options.spill_bytes. The store's refusal otherwise
// (PERMISSION_DENIED for a directory that cannot be written).
StatusOr<std::shared_ptr<KvSpillStore>> MakeSpillStore(const SessionOptions& options,
                                                       const SessionLocation& location,
                                                       bool pool_on_cpu);

// At startup, under the spill policy: whether files can be written in options.spill_dir (the
// store's probe); the refusal names --kv-spill-dir and the system's reason. OK for other policies.
Status CheckSpillDir(const SessionOptions& options);

// A fork's or truncate's `tokens` against the `length` session `id` holds: INVALID_ARGUMENT below
// 0, OUT_OF_RANGE past the length, naming both.
Status CheckBranchTokens(const std::string& id, int64_t tokens, int64_t length);

}  // namespace mha::serve
