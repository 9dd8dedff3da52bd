// `mha-client afd` (docs/afd.md, "The step stream"): the FFN side of attention-FFN disaggregation
// against a server holding a Llama-family model. Opens N sessions, splits them over S LayerSteps
// streams (a thread each), and drives every session through L layers: a prefill chunk of P tokens,
// then T decode steps of one token. Per layer a stream sends one message with its sessions' hidden
// states (rms-normed), adds the attention outputs to each session's residual stream, then runs the
// stand-in FFN (client/stand_in_ffn.h) before the next layer. Reports steps/s (session tokens
// through every layer), per-layer round trips p50/p99 of the decode phase, the failed steps, how
// the server merged the streams' messages, and the server's CPU per layer message. Torch-free.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "client/bench/latency_stats.h"
#include "client/bench/server_cpu.h"
#include "client/mha_client.h"

namespace mha::client {

struct AfdBenchOptions {
  std::string model, model_version;
  int sessions = 32;
  int streams = 1;            // LayerSteps streams, the sessions split evenly over them
  int64_t steps = 64;         // decode steps per session (one token each)
  int64_t prefill = 16;       // tokens of each session's prefill (0 = none)
  int64_t prefill_chunk = 0;  // the prefill in chunks of at most this many tokens (0 = one chunk)
  int64_t layers = 0;         // layers driven, 0 .. layers-1 (0 = every layer of the model)
  uint64_t seed = 0;
  std::chrono::milliseconds timeout{60000};  // per message
  // --shm: hidden states and outputs through shared-memory regions (client/shm_regions.h; the
  // server needs --allow-client-shm=true).
  bool shm = false;
  // Where the stand-in FFN runs between layers: "all" (prefill chunks and decode steps), "decode"
  // (not on prefill chunks: a long prefill at a large E costs the client E^2 FLOPs a row in
  // plain loops, minutes at E=4096 and 128 x 4096 tokens; the decode phase is unchanged) or
  // "none". The round trips never include it.
  std::string ffn = "all";
  // When enabled: the server's CPU seconds over the decode phase, per layer message.
  ServerCpuSource server_cpu;
};

struct AfdBenchReport {
  std::string model;
  int64_t model_layers = 0, layers = 0, embed_dim = 0, num_heads = 0, num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t steps = 0;         // session tokens that went through every driven layer (decode)
  int64_t failed_steps = 0;  // session tokens (prefill chunks count as one) that did not
  int64_t messages = 0;      // layer messages answered OK, both phases
  int64_t failed_messages = 0;
  std::string first_error;
  double prefill_seconds = 0, seconds = 0;  // the decode phase
  double steps_per_s = 0, layer_steps_per_s = 0;
  double ffn_seconds = 0;  // the stand-in FFN, every thread summed
  // Every attention output value received, summed stream by stream: two runs of the same options
  // (in-band and --shm) agree.
  double output_sum = 0;
  // Round trips (write to read) of the decode phase's messages, per layer and of every layer; the
  // count is the messages.
  std::vector<LatencyStats> per_layer;
  LatencyStats all;
  // The server's passes of the decode messages (LayerStepResponse.pass_messages / pass_entries).
  double mean_pass_messages = 0, mean_pass_entries = 0;
  int64_t max_pass_messages = 0;
  double server_compute_mean_us = 0;
  ServerCpuReport server_cpu;  // per decode-phase layer message
};

StatusOr<AfdBenchReport> RunAfdBench(AttentionClient& client, const AfdBenchOptions& options);

// FLOPs (2 per multiply-add) of one decode-phase layer message of `sessions` one-token entries,
// their caches at the phase's mean length: the q/k/v/o projections and q k^T, p v.
double AfdLayerMessageFlops(const AfdBenchReport& report, const AfdBenchOptions& options,
                            int64_t sessions);

std::string AfdBenchReportText(const AfdBenchOptions& options, const AfdBenchReport& report);
std::string AfdBenchReportJson(const AfdBenchReport& report);  // one JSON object

}  // namespace mha::client
