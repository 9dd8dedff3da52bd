// One LayerSteps stream of `mha-client afd` (afd_bench.h): its sessions' residual streams and the
// loop over the layers of one token (or prefill chunk) at a time, with the stand-in FFN between
// the layers. Used from one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/mha_client.h"
#include "client/shm_regions.h"
#include "client/stand_in_ffn.h"
#include "mha/status.h"

namespace mha::client {

struct AfdStreamTally {
  std::vector<std::vector<double>> round_trip_us;               // per layer, decode phase
  std::vector<double> pass_messages, pass_entries, compute_us;  // decode phase, per message
  int64_t messages = 0, failed_messages = 0;
  int64_t steps = 0;         // decode-phase session tokens through every layer
  int64_t failed_steps = 0;  // session tokens that were not (a prefill chunk counts as one)
  double ffn_seconds = 0;
  double output_sum = 0;  // every attention output value received, summed (compares two runs)
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
  // --shm: from now on the hidden states go to the server through a shared-memory region of this
  // stream's and the outputs come back through another (client/shm_regions.h), registered through
  // `stub` (outlives this stream) and sized for `max_tokens` rows per session.
  Status UseSharedMemory(inference::GRPCInferenceService::StubInterface* stub, int64_t max_tokens,
                         int index);

  const AfdStreamTally& tally() const { return tally_; }

 private:
  Status Layer(int64_t layer, int64_t tokens, bool timed);
  // Entry i's hidden rows `x` [tokens, E]: in-band, or written into the input region and named
  // there, its output placed in the output region at the same offset.
  void SetHidden(size_t i, int64_t tokens, const float* x, v1::LayerStepEntry* entry) const;
  // Entry i's output, from the answer or the output region; INTERNAL when it is not [tokens, E].
  Status Output(const v1::LayerStepResponse& response, size_t i, int64_t tokens, float* o) const;
  void Fail(const Status& status);

  AttentionClient& client_;
  const std::vector<std::string> ids_;
  const int64_t layers_;
  const StandInFfn& ffn_;
  const int64_t e_;
  grpc::ClientContext context_;
  std::unique_ptr<AttentionClient::LayerStepsRW> stream_;
  std::vector<float> h_;  // the sessions' current rows, [sessions, tokens, E]
  std::unique_ptr<ShmObject> shm_in_, shm_out_;  // --shm
  int64_t next_id_ = 0;
  bool broken_ = false;
  AfdStreamTally tally_;
};

}  // namespace mha::client
