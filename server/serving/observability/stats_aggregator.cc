#include "server/serving/observability/stats_aggregator.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace mha::serve {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

void AddDouble(std::atomic<double>& target, double value) {  // fetch_add for double is C++20
  double old = target.load(kRelaxed);
  while (!target.compare_exchange_weak(old, old + value, kRelaxed)) {
  }
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::vector<double> Doubling(double from, double below) {
  std::vector<double> bounds;
  for (double b = from; b < below; b *= 2) bounds.push_back(b);
  return bounds;
}

}  // namespace

const std::vector<double>& DurationBounds() {
  static const std::vector<double> bounds = Doubling(50e-6, 14.0);
  return bounds;
}
const std::vector<double>& CountBounds() {
  static const std::vector<double> bounds{1,  2,  3,  4,  6,   8,   12,  16,  24,
                                          32, 48, 64, 96, 128, 192, 256, 512, 1024};
  return bounds;
}
const std::vector<double>& TokenBounds() {
  static const std::vector<double> bounds = Doubling(16, (1 << 20) + 1);
  return bounds;
}
const std::vector<double>& EfficiencyBounds() {
  static const std::vector<double> bounds{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0};
  return bounds;
}

AtomicHistogram::AtomicHistogram(const std::vector<double>* bounds)
    : bounds_(bounds), buckets_(new std::atomic<uint64_t>[bounds->size() + 1]) {
  for (size_t i = 0; i <= bounds_->size(); ++i) buckets_[i].store(0, kRelaxed);
}

void AtomicHistogram::Observe(double value) {
  // Prometheus' `le`: the first bound >= value (+Inf after the last).
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_->begin(), bounds_->end(), value) -
                                       bounds_->begin());
  buckets_[i].fetch_add(1, kRelaxed);
  count_.fetch_add(1, kRelaxed);
  AddDouble(sum_, value);
}

AtomicHistogram::Snapshot AtomicHistogram::Read() const {
  Snapshot s;
  s.buckets.resize(bounds_->size() + 1);
  for (size_t i = 0; i < s.buckets.size(); ++i) s.buckets[i] = buckets_[i].load(kRelaxed);
  s.count = count_.load(kRelaxed);
  s.sum = sum_.load(kRelaxed);
  return s;
}

void AtomicHistogram::Snapshot::Add(const Snapshot& other) {
  if (buckets.size() < other.buckets.size()) buckets.resize(other.buckets.size());
  for (size_t i = 0; i < other.buckets.size(); ++i) buckets[i] += other.buckets[i];
  count += other.count;
  sum += other.sum;
}

void StatsSnapshot::Add(const StatsSnapshot& o) {
  inference_count += o.inference_count, execution_count += o.execution_count;
  success_count += o.success_count, failure_count += o.failure_count;
  queue_ns += o.queue_ns, compute_ns += o.compute_ns;
  last_inference_ms = std::max(last_inference_ms, o.last_inference_ms);
  ok_calls += o.ok_calls, ok_ns += o.ok_ns, failed_calls += o.failed_calls;
  failed_ns += o.failed_ns;
  for (size_t i = 0; i < by_protocol_code.size(); ++i) by_protocol_code[i] += o.by_protocol_code[i];
  request.Add(o.request), queue.Add(o.queue), compute.Add(o.compute);
  batch_size.Add(o.batch_size), batch_rows.Add(o.batch_rows), batch_tokens.Add(o.batch_tokens);
  padding.Add(o.padding), step.Add(o.step);
  real_tokens += o.real_tokens, padded_tokens += o.padded_tokens;
  queue_depth += o.queue_depth, inflight += o.inflight;
  sessions_open += o.sessions_open, kv_blocks_used += o.kv_blocks_used;
  kv_blocks_total += o.kv_blocks_total, kv_bytes_used += o.kv_bytes_used;
  kv_bytes_per_token = std::max(kv_bytes_per_token, o.kv_bytes_per_token);
  session_evictions += o.session_evictions;
  kv_blocks_shared += o.kv_blocks_shared, kv_copies_on_write += o.kv_copies_on_write;
  sessions_spilled += o.sessions_spilled, kv_spill_bytes += o.kv_spill_bytes;
  session_spills += o.session_spills, session_restores += o.session_restores;
  restore.Add(o.restore);
  for (size_t i = 0; i < stage_ns.size(); ++i) stage_ns[i] += o.stage_ns[i];
  staged += o.staged;
}

uint64_t StatsSnapshot::Calls(StatusCode code) const {
  uint64_t n = 0;
  for (int p = 0; p < kProtocolCount; ++p) {
    n += by_protocol_code[static_cast<size_t>(p * kStatusCodeCount + static_cast<int>(code))];
  }
  return n;
}

StatsAggregator::StatsAggregator(std::string model_name, std::string version_name)
    : model(std::move(model_name)),
      version(std::move(version_name)),
      request_(&DurationBounds()),
      queue_(&DurationBounds()),
      compute_(&DurationBounds()),
      batch_size_(&CountBounds()),
      batch_rows_(&CountBounds()),
      batch_tokens_(&TokenBounds()),
      padding_(&EfficiencyBounds()),
      step_(&DurationBounds()),
      restore_(&DurationBounds()) {}

void StatsAggregator::RecordRequest(StatusCode code, double seconds, Protocol protocol) {
  const int c = std::clamp(static_cast<int>(code), 0, kStatusCodeCount - 1);
  by_protocol_code_[static_cast<size_t>(static_cast<int>(protocol) * kStatusCodeCount + c)]
      .fetch_add(1, kRelaxed);
  request_.Observe(seconds);
  const auto ns = static_cast<uint64_t>(std::max(0.0, seconds) * 1e9);
  if (code == StatusCode::kOk) {
    ok_calls_.fetch_add(1, kRelaxed);
    ok_ns_.fetch_add(ns, kRelaxed);
  } else {
    failed_calls_.fetch_add(1, kRelaxed);
    failed_ns_.fetch_add(ns, kRelaxed);
  }
}

void StatsAggregator::RecordInference(bool ok, int64_t rows, int64_t queue_us, int64_t compute_us) {
  (ok ? success_count_ : failure_count_).fetch_add(1, kRelaxed);
  if (ok) inference_count_.fetch_add(rows, kRelaxed);
  queue_ns_.fetch_add(queue_us * 1000, kRelaxed);
  compute_ns_.fetch_add(compute_us * 1000, kRelaxed);
  last_inference_ms_.store(NowMs(), kRelaxed);
}

void StatsAggregator::RecordBatch(int64_t requests, int64_t rows, int64_t real, int64_t padded) {
  execution_count_.fetch_add(1, kRelaxed);
  batch_size_.Observe(static_cast<double>(requests));
  batch_rows_.Observe(static_cast<double>(rows));
  batch_tokens_.Observe(static_cast<double>(padded));
  if (padded > 0) padding_.Observe(static_cast<double>(real) / static_cast<double>(padded));
  AddDouble(real_tokens_, static_cast<double>(real));
  AddDouble(padded_tokens_, static_cast<double>(padded));
}

void StatsAggregator::SetSessionUsage(int64_t sessions, int64_t used, int64_t total,
                                      int64_t block_bytes) {
  sessions_.store(sessions, kRelaxed);
  blocks_used_.store(used, kRelaxed);
  blocks_total_.store(total, kRelaxed);
  bytes_used_.store(used * block_bytes, kRelaxed);
}

void StatsAggregator::SetSessionBranching(const SessionBranching& b) {
  shared_.store(b.shared_blocks, kRelaxed);
  copies_.store(b.copies_on_write, kRelaxed);
  spilled_.store(b.spilled_sessions, kRelaxed);
  spilled_bytes_.store(b.spilled_bytes, kRelaxed);
}

void StatsAggregator::RecordSessionRestore(double seconds) {
  restores_.fetch_add(1, kRelaxed);
  restore_.Observe(seconds);
}

const char* StageName(Stage stage) {
  static constexpr const char* kNames[kStageCount] = {"decode", "queue",   "merge",  "forward",
                                                      "split",  "handoff", "respond"};
  return kNames[static_cast<int>(stage)];
}

void StatsAggregator::RecordStages(const StageTimes& ns) {
  for (size_t i = 0; i < ns.size(); ++i) {
    stage_ns_[i].fetch_add(static_cast<uint64_t>(std::max<int64_t>(0, ns[i])), kRelaxed);
  }
  staged_.fetch_add(1, kRelaxed);
}

void StatsAggregator::AddStage(Stage stage, int64_t ns) {
  stage_ns_[static_cast<size_t>(stage)].fetch_add(static_cast<uint64_t>(std::max<int64_t>(0, ns)),
                                                  kRelaxed);
}

StatsSnapshot StatsAggregator::Read() const {
  StatsSnapshot s;
  s.inference_count = inference_count_.load(kRelaxed);
  s.execution_count = execution_count_.load(kRelaxed);
  s.success_count = success_count_.load(kRelaxed);
  s.failure_count = failure_count_.load(kRelaxed);
  s.queue_ns = queue_ns_.load(kRelaxed);
  s.compute_ns = compute_ns_.load(kRelaxed);
  s.last_inference_ms = last_inference_ms_.load(kRelaxed);
  s.ok_calls = ok_calls_.load(kRelaxed), s.ok_ns = ok_ns_.load(kRelaxed);
  s.failed_calls = failed_calls_.load(kRelaxed), s.failed_ns = failed_ns_.load(kRelaxed);
  for (size_t i = 0; i < s.by_protocol_code.size(); ++i) {
    s.by_protocol_code[i] = by_protocol_code_[i].load(kRelaxed);
  }
  s.request = request_.Read(), s.queue = queue_.Read(), s.compute = compute_.Read();
  s.batch_size = batch_size_.Read(), s.batch_rows = batch_rows_.Read();
  s.batch_tokens = batch_tokens_.Read(), s.padding = padding_.Read(), s.step = step_.Read();
  s.real_tokens = real_tokens_.load(kRelaxed), s.padded_tokens = padded_tokens_.load(kRelaxed);
  s.queue_depth = queue_depth_.load(kRelaxed), s.inflight = inflight_.load(kRelaxed);
  s.sessions_open = sessions_.load(kRelaxed), s.kv_blocks_used = blocks_used_.load(kRelaxed);
  s.kv_blocks_total = blocks_total_.load(kRelaxed), s.kv_bytes_used = bytes_used_.load(kRelaxed);
  s.kv_bytes_per_token = kv_bytes_per_token_.load(kRelaxed);
  s.session_evictions = evictions_.load(kRelaxed);
  s.kv_blocks_shared = shared_.load(kRelaxed), s.kv_copies_on_write = copies_.load(kRelaxed);
  s.sessions_spilled = spilled_.load(kRelaxed), s.kv_spill_bytes = spilled_bytes_.load(kRelaxed);
  s.session_spills = spills_.load(kRelaxed), s.session_restores = restores_.load(kRelaxed);
  s.restore = restore_.Read();
  for (size_t i = 0; i < s.stage_ns.size(); ++i) s.stage_ns[i] = stage_ns_[i].load(kRelaxed);
  s.staged = staged_.load(kRelaxed);
  return s;
}

}  // namespace mha::serve
