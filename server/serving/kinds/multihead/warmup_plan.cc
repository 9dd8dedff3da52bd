#include "server/serving/kinds/multihead/warmup_plan.h"

#include <algorithm>
#include <set>
#include <tuple>
#include <utility>

#include "server/serving/kinds/multihead/batch_assembly.h"

namespace mha::serve {
namespace {

int64_t NextPow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// The length-bucket edges up to max_seq: every length a merged pass of one bucket may pad to.
std::vector<int64_t> Lengths(int64_t max_seq) {
  std::set<int64_t> edges;
  for (int64_t len = 1; len <= max_seq; ++len) {
    const int64_t edge = LengthBucket(len);
    if (edge <= max_seq) edges.insert(edge);
  }
  return {edges.begin(), edges.end()};
}

// The padded batches of graphs a merged pass of length `len` can replay: the smallest real batch
// that pads to P (P / 2 + 1, or 1) fits the merge's rows and tokens, P x len the graph's tokens.
std::vector<int64_t> GraphBatches(int64_t len, int64_t rows, int64_t tokens,
                                  const GraphLimits& graphs) {
  std::vector<int64_t> batches;
  for (int64_t padded = 1; padded <= NextPow2(rows); padded *= 2) {
    const int64_t smallest = padded == 1 ? 1 : padded / 2 + 1;
    if (smallest > rows || smallest * len > tokens) break;
    if (padded * len > graphs.max_tokens) break;
    batches.push_back(padded);
  }
  return batches;
}

}  // namespace

std::string DeviceWarmupPlan::Describe(const DeviceWarmupOptions& options) const {
  std::string s = std::to_string(graph_passes) + " graph buckets + " +
                  std::to_string(eager_passes) + " eager shapes";
  if (dropped > 0) {
    s += " (" + std::to_string(dropped) + " past the bound of " +
         std::to_string(options.max_passes) + ")";
  }
  return s;
}

DeviceWarmupPlan PlanDeviceWarmup(const BatcherOptions& scheduler, const GraphLimits& graphs,
                                  const DeviceWarmupOptions& options) {
  const int64_t rows = scheduler.batching ? std::max<int64_t>(1, scheduler.max_batch_rows) : 1;
  const int64_t tokens = std::max<int64_t>(1, scheduler.max_batch_tokens);
  const std::vector<int64_t> lengths = Lengths(options.max_seq);
  DeviceWarmupPlan plan;
  std::set<std::pair<int64_t, int64_t>> graphed;  // (padded B, T)
  const int64_t graph_budget =
      graphs.shared ? std::min(options.max_graphs, graphs.max_graphs / 2) : 0;
  for (int64_t len : lengths) {
    for (int64_t padded : GraphBatches(len, rows, tokens, graphs)) {
      if (static_cast<int64_t>(graphed.size()) >= graph_budget) break;
      graphed.insert({padded, len});
    }
  }
  // With graphs on, a pass whose padded bucket fits the graph's tokens is never warmed eagerly:
  // it replays a planned graph, or its own pass would be captured here (on the loading thread's
  // stream with 1.13) and spend the bound that the plan leaves for traffic.
  std::vector<WarmupShape> eager;
  for (int64_t len : lengths) {
    for (int64_t batch = 1; batch <= rows && batch * len <= tokens; ++batch) {
      const bool graph_path = graphs.max_graphs > 0 && NextPow2(batch) * len <= graphs.max_tokens;
      if (!graph_path) eager.push_back({batch, len, false});
    }
  }
  // Graph buckets first, in (T, B) order, then the eager shapes; all within max_passes.
  std::vector<std::pair<int64_t, int64_t>> ordered(graphed.begin(), graphed.end());
  std::sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second, a.first) < std::tie(b.second, b.first);
  });
  const auto room = [&] { return static_cast<int64_t>(plan.passes.size()) < options.max_passes; };
  for (const auto& [padded, len] : ordered) {
    if (!room()) break;
    plan.passes.push_back({padded, len, false});
    ++plan.graph_passes;
  }
  for (const WarmupShape& shape : eager) {
    if (!room()) break;
    plan.passes.push_back(shape);
    ++plan.eager_passes;
  }
  plan.dropped = static_cast<int64_t>(ordered.size() + eager.size()) -
                 static_cast<int64_t>(plan.passes.size());
  return plan;
}

}  // namespace mha::serve
