// One LayerSteps stream of `mha-client afd` (afd_bench.h): its sessions' residual streams and the
// loop over the layers of one token (or prefill chunk) at a time, with the stand-in FFN between
// the layers. Used from one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/bench/stand_in_ffn.h"
#include "client/mha_client.h"
#include "mha/status.h"

namespace mha::client {

struct AfdStreamTally {
  std::vector<std::vector<double>> round_trip_us;               // per layer, decode phase
  std::vector<double> pass_messages, pass_entries, compute_us;  // decode phase, per message
  int64_t messages = 0, failed_messages = 0;
  int64_t steps = 0;         // decode-phase session tokens through every layer
  int64_t failed_steps = 0;  // session tokens that were not (a prefill chunk counts as one)
  double ffn_seconds = 0;
  Status first_error;
};

class AfdStream {
 public:
  // `ids`: this stream's sessions (opened); `layers`: the layers driven.
  AfdStream(AttentionClient& client, std::vector<std::string> ids, int64_t layers,
            const StandInFfn& ffn, uint64_t seed, std::chrono::milliseconds timeout,
            int64_t messages);
  ~AfdStream();

  // One token (or chunk) of `tokens` rows for every session through every layer (its rows follow
  // on from the last row of the previous call's); `timed`: the
  // decode phase (round trips recorded). After a failure every later call only counts its
  // session tokens as failed.
  void Token(int64_t tokens, bool timed);
  // Half-closes the stream and reads its status (an error is tallied).
  void Finish();

  const AfdStreamTally& tally() const { return tally_; }

 private:
  Status Layer(int64_t layer, int64_t tokens, bool timed);
  void Fail(const Status& status);

  AttentionClient& client_;
  const std::vector<std::string> ids_;
  const int64_t layers_;
  const StandInFfn& ffn_;
  const int64_t e_;
  grpc::ClientContext context_;
  std::unique_ptr<AttentionClient::LayerStepsRW> stream_;
  std::vector<float> h_;  // the sessions' current rows, [sessions, tokens, E]
  int64_t next_id_ = 0;
  bool broken_ = false;
  AfdStreamTally tally_;
};

}  // namespace mha::client
