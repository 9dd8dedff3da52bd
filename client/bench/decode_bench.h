// Load generator for `mha-client decode` (docs/sessions.md): opens `sessions` decoding sessions,
// optionally prefills each with `prefill` tokens in one step, then steps every session `tokens`
// times with one new token (random query [batch, 1, E]), one thread per session (closed loop:
// each session sends its next step after the answer, as a decoder must), each step a unary
// Forward or (stream) a message on the session's one ForwardStream. Reports steps/s over
// every session and the step latency percentiles. Torch-free: queries are built as wire bytes.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "client/bench/bench_runner.h"
#include "client/mha_client.h"

namespace mha::client {

struct DecodeBenchOptions {
  std::string model, model_version;
  int sessions = 1;
  int64_t tokens = 128;  // decode steps per session (one token each)
  int64_t prefill = 0;   // tokens of a first step (not timed); 0 = none
  int64_t batch = 1;     // rows per session
  bool need_weights = false;
  bool per_head = false;  // with need_weights: per-head weights (average_attn_weights false)
  // No session: every step sends the whole prefix [B, i + 1, E] with is_causal and keeps the
  // last row (the baseline a session replaces).
  bool stateless = false;
  // Each session's steps as messages of one ForwardStream instead of one Forward call each.
  bool stream = false;
  std::chrono::milliseconds timeout{60000};
  uint64_t seed = 0;
  // A session lost with its replica is re-opened and replayed (client/decoding_session.h).
  bool resume = true;
  // > 0: each session, after its prefill, forks this many continuations (ForkSession of every
  // token) and each continuation steps `tokens` times (a thread each); the source only holds the
  // prefix (client/decode_branch.h).
  int fork = 0;
  // > 0: speculative decoding: each of the `tokens` rounds appends this many tokens in one step,
  // then truncates back a random 0..speculate of them (TruncateSession); a round's latency is both.
  int64_t speculate = 0;
  // When enabled: the server's CPU seconds before and after the run, reported per answered step
  // (sessions opened, prefilled and closed included, as `seconds` is).
  ServerCpuSource server_cpu;
};

struct DecodeBenchReport {
  int64_t steps = 0, errors = 0;
  std::string first_error;
  int64_t embed_dim = 0;
  double seconds = 0;       // the timed decode steps, all sessions
  double steps_per_s = 0;   // answered steps of every session per second
  double tokens_per_s = 0;  // steps_per_s * batch
  LatencyStats latency;     // the answered steps
  // The server's KV cache at CloseSession, summed over the sessions: blocks given back and the
  // token slots they hold vs the tokens cached (rows * tokens).
  int64_t kv_blocks = 0, kv_block_tokens = 0, cached_tokens = 0;
  // Sessions re-opened and replayed after their replica was lost, and what a replay took.
  int64_t resumed = 0;
  // Sessions restored from a shared KV store after their replica was lost that replayed their
  // tail (client/decoding_session.h), and the tokens per row sent again by both.
  int64_t resynced = 0, replayed_tokens = 0;
  double replay_ms_p50 = 0, replay_ms_max = 0;
  ServerCpuReport server_cpu;  // per step; FLOPs and efficiency filled by the caller
  // Every answered step (as BenchReport's samples), for pictures (mha-client decode --plot).
  std::vector<double> sample_latency_us, sample_done_s;
  // need_weights, plain sessions: the weights of session 0's last answered step ([B, 1, L] or
  // [B, H, 1, L]; unset otherwise) and the session's tokens L after it.
  v1::Tensor last_step_weights;
  int64_t last_step_tokens = 0;
};

std::string DecodeBenchReportJson(const DecodeBenchReport& report);  // one JSON object

// The attention FLOPs of one decode step of one session on a model of width `embed_dim`, averaged
// over the run's steps (a step attends over the prefill and the tokens before it):
// 8*B*E^2 (q, k, v and out projections of one token) + 4*B*L*E (scores and weighted sum over L).
double DecodeStepFlops(const DecodeBenchOptions& options, int64_t embed_dim);

StatusOr<DecodeBenchReport> RunDecodeBench(AttentionClient& client,
                                           const DecodeBenchOptions& options);
std::string DecodeBenchReportText(const DecodeBenchOptions& options,
                                  const DecodeBenchReport& report);

}  // namespace mha::client
