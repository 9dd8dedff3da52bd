// One model version's statistics (Triton's InferenceStatsAggregator): every number the server
// reports about a version lives here once, and everything reads it: mha.v1 GetModelStatistics,
// the Open Inference Protocol's ModelStatistics and Prometheus' /metrics (metrics.h exports the
// aggregators at scrape time). Recording is lock-free (relaxed atomics, histograms of atomic
// buckets), so the hot path takes no lock; reading takes a snapshot and never creates anything.
// A model also has one aggregator of version "" for the requests refused before any version was
// chosen (unknown version, a full queue of no version, shutting down).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mha/status.h"
#include "server/serving/protocol.h"

namespace mha::serve {

// A histogram of fixed upper bounds (Prometheus' `le`, +Inf implied) with atomic buckets.
class AtomicHistogram {
 public:
  struct Snapshot {
    std::vector<uint64_t> buckets;  // per bound, then +Inf; not cumulative
    uint64_t count = 0;
    double sum = 0;
    void Add(const Snapshot& other);
  };
  explicit AtomicHistogram(const std::vector<double>* bounds);
  void Observe(double value);
  Snapshot Read() const;
  const std::vector<double>& bounds() const { return *bounds_; }

 private:
  const std::vector<double>* bounds_;  // shared, static (metrics.cc)
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

// The bucket bounds of the exported histograms (static, shared by every aggregator).
const std::vector<double>& DurationBounds();    // 50 us, doubling, up to ~13 s
const std::vector<double>& CountBounds();       // requests / rows per pass
const std::vector<double>& TokenBounds();       // 16 .. 2^20 tokens per pass
const std::vector<double>& EfficiencyBounds();  // real / padded tokens

// Where a computed request's time goes on the server (docs/performance.md's breakdown; Triton's
// compute_input/compute_infer/compute_output, finer): decode (the front end received it -> the
// scheduler has it: decoding tensors, validating), queue, merge (a merged pass's inputs), forward,
// split (its outputs), handoff (the worker's answer -> the completion thread), respond (the front
// end's encode, serialize and Finish call). gRPC's own parse and send are not in it: the echo
// floor (bench/echo_floor.cc) measures those.
enum class Stage { kDecode, kQueue, kMerge, kForward, kSplit, kHandoff, kRespond };
inline constexpr int kStageCount = 7;
const char* StageName(Stage stage);
using StageTimes = std::array<int64_t, kStageCount>;  // nanoseconds, by Stage

// What a reader sees of one aggregator (or the sum of several).
struct StatsSnapshot {
  // Triton's ModelStatistics / mha.v1 ModelStatistics.
  int64_t inference_count = 0;  // batch rows (sum of B) of the requests answered OK
  int64_t execution_count = 0;  // forward passes (a merged batch is one)
  int64_t success_count = 0, failure_count = 0;  // requests that reached the version
  int64_t queue_ns = 0, compute_ns = 0;          // summed over those requests
  int64_t last_inference_ms = 0;                 // Unix time of the last answer; 0 = none yet
  // Every answered call (mha_requests_total): counts and durations by outcome, by protocol/code.
  uint64_t ok_calls = 0, ok_ns = 0, failed_calls = 0, failed_ns = 0;
  std::array<uint64_t, kProtocolCount * kStatusCodeCount> by_protocol_code{};
  AtomicHistogram::Snapshot request, queue, compute, batch_size, batch_rows, batch_tokens, padding,
      step;
  double real_tokens = 0, padded_tokens = 0;
  int64_t queue_depth = 0, inflight = 0;
  int64_t sessions_open = 0, kv_blocks_used = 0, kv_blocks_total = 0, kv_bytes_used = 0;
  int64_t kv_bytes_per_token = 0;  // of one layer, in the version's KV cache dtype (a sum: the max)
  uint64_t session_evictions = 0;
  int64_t kv_blocks_shared = 0, kv_copies_on_write = 0, sessions_spilled = 0, kv_spill_bytes = 0;
  uint64_t session_spills = 0, session_restores = 0;
  AtomicHistogram::Snapshot restore;
  std::array<uint64_t, kStageCount> stage_ns{};  // summed over `staged` requests
  uint64_t staged = 0;
  void Add(const StatsSnapshot& other);
  uint64_t Calls(StatusCode code) const;  // over every protocol
};

// The branching sessions of a version (fork, truncate, spill): its pool's shared blocks and copies
// on write, and its spill store.
struct SessionBranching {
  int64_t shared_blocks = 0, copies_on_write = 0, spilled_sessions = 0, spilled_bytes = 0;
};

class StatsAggregator {
 public:
  StatsAggregator(std::string model, std::string version);
  StatsAggregator(const StatsAggregator&) = delete;
  StatsAggregator& operator=(const StatsAggregator&) = delete;

  // One answered call (mha_requests_total, mha_request_duration_seconds, by protocol and code).
  void RecordRequest(StatusCode code, double seconds, Protocol protocol = Protocol::kNative);
  // One request that reached the version, answered: ModelStatistics' counters (not
  // mha_requests_total: that is RecordRequest, reached through internal::CountRequest only).
  void RecordInference(bool ok, int64_t rows, int64_t queue_us, int64_t compute_us);
  void RecordQueue(double seconds) { queue_.Observe(seconds); }
  void RecordCompute(double seconds) { compute_.Observe(seconds); }
  // One forward pass of `requests` requests, `rows` batch rows in all.
  void RecordBatch(int64_t requests, int64_t rows, int64_t real_tokens, int64_t padded_tokens);
  void SetQueueDepth(int64_t depth) { queue_depth_.store(depth, std::memory_order_relaxed); }
  void AddInflight(int64_t delta) { inflight_.fetch_add(delta, std::memory_order_relaxed); }
  // Decoding sessions of the version.
  void SetSessionUsage(int64_t sessions, int64_t blocks_used, int64_t blocks_total,
                       int64_t block_bytes);
  // What a token of one layer takes in the version's KV cache (its dtype's bytes, scales included).
  void SetKvBytesPerToken(int64_t bytes) {
    kv_bytes_per_token_.store(bytes, std::memory_order_relaxed);
  }
  void RecordSessionEviction() { evictions_.fetch_add(1, std::memory_order_relaxed); }
  void SetSessionBranching(const SessionBranching& b);
  void RecordSessionSpill() { spills_.fetch_add(1, std::memory_order_relaxed); }
  void RecordSessionRestore(double seconds);
  void RecordStep(double seconds) { step_.Observe(seconds); }
  // One computed request's breakdown (counts the request); AddStage adds to one stage's sum only.
  void RecordStages(const StageTimes& ns);
  void AddStage(Stage stage, int64_t ns);

  StatsSnapshot Read() const;

  const std::string model, version;

 private:
  std::array<std::atomic<uint64_t>, kProtocolCount * kStatusCodeCount> by_protocol_code_{};
  std::atomic<uint64_t> ok_calls_{0}, ok_ns_{0}, failed_calls_{0}, failed_ns_{0};
  std::atomic<int64_t> inference_count_{0}, execution_count_{0}, success_count_{0};
  std::atomic<int64_t> failure_count_{0}, queue_ns_{0}, compute_ns_{0}, last_inference_ms_{0};
  AtomicHistogram request_, queue_, compute_, batch_size_, batch_rows_, batch_tokens_, padding_,
      step_;
  std::atomic<double> real_tokens_{0}, padded_tokens_{0};
  std::atomic<int64_t> queue_depth_{0}, inflight_{0};
  std::atomic<int64_t> sessions_{0}, blocks_used_{0}, blocks_total_{0}, bytes_used_{0};
  std::atomic<int64_t> kv_bytes_per_token_{0};
  std::atomic<uint64_t> evictions_{0}, spills_{0}, restores_{0};
  std::atomic<int64_t> shared_{0}, copies_{0}, spilled_{0}, spilled_bytes_{0};
  AtomicHistogram restore_;
  std::array<std::atomic<uint64_t>, kStageCount> stage_ns_{};
  std::atomic<uint64_t> staged_{0};
};

}  // namespace mha::serve
