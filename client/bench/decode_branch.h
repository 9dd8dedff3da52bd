// mha-client decode's branching runs (docs/sessions.md, "Fork, truncate and spill"): --fork N
// grows N continuations from one prefix (ForkSession), --speculate K appends K tokens per round and
// truncates back a random number of them (TruncateSession), as a speculative decoder rolls back
// the draft tokens its verifier rejects.
#pragma once

#include <cstdint>

#include "client/bench/decode_bench.h"
#include "client/bench/decode_tally.h"

namespace mha::client {

// Session `index`: open, prefill, fork o.fork continuations of every token, step each o.tokens
// times (a thread each, latencies tallied), then close every branch (blocks tallied).
void RunForkedSession(AttentionClient& client, const DecodeBenchOptions& o, int64_t embed_dim,
                      int index, Tally* tally);
// Session `index`: open, prefill, then o.tokens rounds of one step of o.speculate tokens and a
// truncate back 0..o.speculate of them (a round's latency: both calls).
void RunSpeculativeSession(AttentionClient& client, const DecodeBenchOptions& o, int64_t embed_dim,
                           int index, Tally* tally);

}  // namespace mha::client
