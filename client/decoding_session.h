// A decoding session as an application holds it (docs/scale-out.md, docs/sessions.md), over the
// torch-free client: the library chooses the session id before the session exists (so that a
// proxy hashing the x-session-id header pins the session to one replica from its first call),
// sends that header on every call, and keeps what the session was given: the OpenSession request
// (a cross-attention session's encoder key/value included) and every answered step's request,
// bounded by the session's max_tokens. When a step finds the session gone (NOT_FOUND: the replica
// that held it was lost, restarted or scaled out, so the id now hashes elsewhere; UNAVAILABLE on
// the way there is retried first), the session re-opens the same id and replays its tokens, then
// sends the step again: the application sees the step's answer, exact, and no error. Behind a
// shared KV store (docs/scale-out.md) the session outlives its replica: a step is answered by the
// replica that restored it, and when that replica restored it from what a lost replica had
// written, the step is refused ABORTED with "[session_tokens=N]": the session replays only its
// tokens from N (Resync), then sends the step again.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/mha_client.h"

namespace mha::client {

struct DecodingSessionOptions {
  bool resume = true;    // false: a lost session's NOT_FOUND reaches the caller
  bool stream = false;   // the steps as messages of one ForwardStream instead of unary Forwards
  int max_attempts = 6;  // per step: sends (first + retries after UNAVAILABLE or a resume)
  std::chrono::milliseconds backoff{25};     // before a retry after UNAVAILABLE, doubled each time
  std::chrono::milliseconds timeout{60000};  // per call (a stream: per step, times max_tokens)
};

// What resuming cost this session so far.
struct DecodingSessionStats {
  int64_t resumes = 0;            // re-opens with replay
  int64_t resyncs = 0;            // replays of the tail after a restore from the KV store
  int64_t replayed_tokens = 0;    // tokens per row sent again (resumes and resyncs)
  int64_t retries = 0;            // steps sent again (after UNAVAILABLE or a resume)
  std::vector<double> replay_ms;  // each resume: re-open + replay, wall time
  int64_t closes_elsewhere = 0;   // Close found no session where the id hashes now (see Close)
};

class DecodingSession {
 public:
  // Opens a session. open.session_id() empty = a new random id ("c-" + 32 hex digits).
  static StatusOr<std::unique_ptr<DecodingSession>> Open(AttentionClient* client,
                                                         v1::OpenSessionRequest open,
                                                         DecodingSessionOptions options = {});
  ~DecodingSession();

  // One step: `step.query` holds only the new tokens [B, T_new, E] (masks, need_weights and the
  // other ForwardRequest fields as for any step); session_id is filled in here.
  StatusOr<v1::ForwardResponse> Step(v1::ForwardRequest step);
  // Ends the session on the server (CloseSession; a stream is finished first). With resume on, a
  // NOT_FOUND answer (the id's hash moved to a replica that never held it) counts as closed: an
  // empty response, counted in stats().closes_elsewhere.
  StatusOr<v1::CloseSessionResponse> Close();

  const std::string& id() const { return open_.session_id(); }
  const v1::OpenSessionResponse& opened() const { return opened_; }
  int64_t tokens() const { return tokens_; }  // per row, as the server counts them
  const DecodingSessionStats& stats() const { return stats_; }

 private:
  DecodingSession(AttentionClient* client, v1::OpenSessionRequest open,
                  DecodingSessionOptions options);
  Status OpenOnServer();
  StatusOr<v1::ForwardResponse> Send(const v1::ForwardRequest& step);
  Status FinishStream();
  // Re-opens the id (closing a half-alive copy first) and replays every answered step's tokens.
  Status Resume();
  // Replays the answered tokens from `from` on (every one when 0).
  Status Replay(int64_t from = 0);
  // The server holds the first `held` tokens only (restored from the KV store): the rest again.
  Status Resync(int64_t held);

  AttentionClient* client_;
  v1::OpenSessionRequest open_;
  DecodingSessionOptions options_;
  v1::OpenSessionResponse opened_;
  std::vector<v1::ForwardRequest> answered_;  // what a resume replays
  int64_t tokens_ = 0;
  DecodingSessionStats stats_;
  std::unique_ptr<grpc::ClientContext> stream_context_;
  std::unique_ptr<AttentionClient::ForwardStreamRW> stream_;
};

// "c-" + 32 hex digits from a random 128-bit number.
std::string NewClientSessionId();

}  // namespace mha::client
