// The default warm-up of a model on a CUDA device (docs/configuration.md): the passes that make
// every shape the merge will form pay its first-time cost (a CUDA graph capture, a cuBLAS
// heuristic, a kernel's first launch) before READY rather than under load (Triton's model_warmup).
// Computed without a device from the version's scheduler options and its CUDA-graph limits, so it
// is unit-tested on any host. config.json's "warmup" replaces it; on the CPU the kind's small
// default runs instead.
//
// The grid: query lengths T at the merge's length-bucket edges (LengthBucket: 8, 16, ..., 64) up
// to max_seq; for each T, first the CUDA-graph buckets (padded B = 1, 2, 4, ... that a merged pass
// of at most max_batch_rows rows and max_batch_tokens tokens pads to, padded B x T within the
// graph's max_tokens), in (T, B) order, at most DeviceWarmupOptions::max_graphs and half the
// model's bound (the other half is captured on first use, for the lengths traffic brings); each
// is captured once per version and shared by every instance stream. Then the eager merged
// shapes: every B from 1 to max_batch_rows with B x T <= max_batch_tokens that never takes the
// graph path (graphs off, or padded B x T over the graph's max_tokens); a graph-eligible pass
// outside the planned buckets is left to its first use, which captures it while the bound has
// room (a warm-up pass of it would be captured too). Deduplicated; at most max_passes passes in
// all, graph buckets first (the rest is counted as dropped).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/serving/repository/serving_config.h"
#include "server/serving/scheduling/batcher_options.h"

namespace mha::serve {

struct DeviceWarmupOptions {
  int64_t max_seq = 64;      // the longest query length warmed (a length-bucket edge)
  int64_t max_graphs = 16;   // graph buckets captured at most (and half the model's bound)
  int64_t max_passes = 512;  // passes of the plan at most, graph buckets first
};

// The model's CUDA graphs as mha::ModelInfo reports them; max_graphs 0: no graphs.
struct GraphLimits {
  int64_t max_tokens = 0;
  int64_t max_graphs = 0;
  bool shared = false;  // one graph per bucket for every stream; else per stream: none planned
};

struct DeviceWarmupPlan {
  std::vector<WarmupShape> passes;  // output-only self-attention [B, T, E], graph buckets first
  int64_t graph_passes = 0;         // the first passes: one capture each
  int64_t eager_passes = 0;
  int64_t dropped = 0;  // shapes of the grid past max_passes
  // "N graph buckets + M eager shapes (K past the bound of P)" for the warm-up's log line.
  std::string Describe(const DeviceWarmupOptions& options) const;
};

// The plan for a model whose merge runs with `scheduler` (batching off: B = 1 only).
DeviceWarmupPlan PlanDeviceWarmup(const BatcherOptions& scheduler, const GraphLimits& graphs,
                                  const DeviceWarmupOptions& options = {});

}  // namespace mha::serve
