#include "client/bench/decode_bench.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "client/bench/decode_branch.h"
#include "client/bench/decode_tally.h"
#include "client/decoding_session.h"
#include "proto/wire/status_convert.h"

namespace mha::client {
namespace {

// Sends a session's steps: a unary Forward each, or messages of one ForwardStream (the stream's
// deadline covers all of them: `timeout` per step).
class Stepper {
 public:
  Stepper(AttentionClient& client, const DecodeBenchOptions& o) : client_(client), o_(o) {
    if (o.stream) stream_ = client.OpenForwardStream(&context_, o.timeout * (o.tokens + 1));
  }
  ~Stepper() { (void)Finish(); }

  Status Step(const v1::ForwardRequest& step) {
    if (!stream_) return client_.ForwardRaw(step, o_.timeout).status();
    if (stream_->Write(step) && stream_->Read(&response_)) return Status::Ok();
    const Status s = Finish();  // the server ended the stream: its status says why
    return s.ok() ? Internal("ForwardStream ended before the step was answered") : s;
  }

  // Ends the stream (OK when there is none, as for unary steps).
  Status Finish() {
    if (!stream_) return Status::Ok();
    stream_->WritesDone();
    Status s = codec::FromGrpcStatus(stream_->Finish());
    stream_.reset();
    return s;
  }

 private:
  AttentionClient& client_;
  const DecodeBenchOptions& o_;
  grpc::ClientContext context_;
  std::unique_ptr<AttentionClient::ForwardStreamRW> stream_;
  v1::ForwardResponse response_;
};

// Sends one step and keeps its latency; false, with the error tallied, when it fails.
bool TimedStep(Stepper& stepper, const v1::ForwardRequest& step, Tally* tally,
               StepSamples* samples) {
  const auto start = std::chrono::steady_clock::now();
  const Status s = stepper.Step(step);
  if (!s.ok()) {
    tally->Error(s);
    return false;
  }
  samples->Add(start);
  return true;
}

// The baseline: the whole prefix each step (is_causal), last row kept; no session.
void RunStateless(AttentionClient& client, const DecodeBenchOptions& o, int64_t e, int index,
                  Tally* tally) {
  std::mt19937_64 rng(o.seed * 1000003 + static_cast<uint64_t>(index));
  std::vector<std::string> rows(static_cast<size_t>(o.batch));  // each row's prefix bytes
  auto append = [&](int64_t t) {
    const v1::Tensor q = RandomQuery(o.batch, t, e, &rng);
    const size_t row_bytes = static_cast<size_t>(t * e) * sizeof(float);
    for (size_t b = 0; b < rows.size(); ++b) rows[b] += q.data().substr(b * row_bytes, row_bytes);
  };
  if (o.prefill > 0) append(o.prefill);
  StepSamples mine = tally->Samples();
  v1::ForwardRequest step;
  step.set_model(o.model);
  step.set_model_version(o.model_version);
  step.set_is_causal(true);
  Stepper stepper(client, o);
  for (int64_t i = 0; i < o.tokens; ++i) {
    append(1);
    const int64_t len = o.prefill + i + 1;
    v1::Tensor* q = step.mutable_query();
    q->Clear();
    q->set_dtype(v1::FLOAT32);
    for (int64_t d : {o.batch, len, e}) q->add_shape(d);
    std::string data;
    for (const auto& r : rows) data += r;
    q->set_data(std::move(data));
    if (!TimedStep(stepper, step, tally, &mine)) break;
  }
  if (Status s = stepper.Finish(); !s.ok()) tally->Error(s);
  std::lock_guard<std::mutex> lock(tally->mu);
  tally->MergeLocked(mine);
}

// One session's whole life through the client library's DecodingSession (a client-chosen id sent
// as x-session-id; a lost session re-opened and replayed): open, prefill, `tokens` timed steps,
// close.
void RunSession(AttentionClient& client, const DecodeBenchOptions& o, int64_t e, int index,
                Tally* tally) {
  std::mt19937_64 rng(o.seed * 1000003 + static_cast<uint64_t>(index));
  v1::OpenSessionRequest open;
  open.set_model(o.model);
  open.set_model_version(o.model_version);
  open.set_batch_size(o.batch);
  open.set_max_tokens(o.prefill + o.tokens);
  DecodingSessionOptions options;
  options.stream = o.stream;
  options.timeout = o.timeout;
  options.resume = o.resume;
  auto session = DecodingSession::Open(&client, open, options);
  if (!session.ok()) return tally->Error(session.status());
  DecodingSession& s = **session;
  v1::ForwardRequest step;
  SetWeightsOptions(o, &step);
  StepSamples mine = tally->Samples();
  Status failed;
  if (o.prefill > 0) {
    *step.mutable_query() = RandomQuery(o.batch, o.prefill, e, &rng);
    failed = s.Step(step).status();
  }
  v1::ForwardResponse last;  // session 0 keeps its last answer's weights for the tally
  for (int64_t i = 0; failed.ok() && i < o.tokens; ++i) {
    *step.mutable_query() = RandomQuery(o.batch, 1, e, &rng);
    const auto start = std::chrono::steady_clock::now();
    auto answer = s.Step(step);
    failed = answer.status();
    if (!failed.ok()) break;
    mine.Add(start);
    if (index == 0 && o.need_weights) last = std::move(answer.value());
  }
  if (!failed.ok()) tally->Error(failed);
  auto closed = s.Close();
  if (!closed.ok()) tally->Error(closed.status());
  std::lock_guard<std::mutex> lock(tally->mu);
  if (closed.ok()) {
    tally->kv_blocks += closed->kv_blocks();
    tally->kv_block_tokens = s.opened().kv_block_tokens();
    tally->cached_tokens += closed->tokens() * o.batch;
  }
  tally->resumes += s.stats().resumes;
  tally->resyncs += s.stats().resyncs;
  tally->replayed_tokens += s.stats().replayed_tokens;
  tally->replay_ms.insert(tally->replay_ms.end(), s.stats().replay_ms.begin(),
                          s.stats().replay_ms.end());
  tally->MergeLocked(mine);
  if (last.has_attn_weights()) {
    tally->last_step_weights = std::move(*last.mutable_attn_weights());
    tally->last_step_tokens = last.session_tokens();
  }
}

// The report's counts, samples, percentiles and rates from the finished run's tally, with the
// server's CPU over the run from `cpu`. The caller has set r->seconds.
void Summarize(const DecodeBenchOptions& o, const ServerCpuMeter& cpu, Tally* t,
               DecodeBenchReport* r) {
  r->sample_latency_us = t->latencies;  // in merge order: each beside its answer time
  r->sample_done_s = t->done_s;
  r->last_step_weights = std::move(t->last_step_weights);
  r->last_step_tokens = t->last_step_tokens;
  r->latency = SummarizeLatencies(std::move(t->latencies));
  r->steps = r->latency.count;
  r->server_cpu = cpu.Finish(r->steps);
  r->errors = t->errors;
  r->first_error = t->first_error;
  r->kv_blocks = t->kv_blocks;
  r->kv_block_tokens = t->kv_block_tokens;
  r->cached_tokens = t->cached_tokens;
  r->resumed = t->resumes;
  const LatencyStats replay = SummarizeLatencies(std::move(t->replay_ms));
  r->replay_ms_p50 = replay.p50_us;  // the same summary, in milliseconds here
  r->replay_ms_max = replay.max_us;
  r->steps_per_s = r->seconds > 0 ? r->steps / r->seconds : 0;
  r->tokens_per_s = r->steps_per_s * o.batch;
}

}  // namespace

StatusOr<DecodeBenchReport> RunDecodeBench(AttentionClient& client, const DecodeBenchOptions& o) {
  if (o.sessions < 1 || o.tokens < 1 || o.batch < 1 || o.prefill < 0) {
    return InvalidArgument("decode: --sessions, --tokens and --batch must be >= 1");
  }
  if (o.fork < 0 || o.speculate < 0 || (o.fork > 0 && o.speculate > 0) ||
      ((o.fork > 0 || o.speculate > 0) && (o.stateless || o.stream))) {
    return InvalidArgument(
        "decode: --fork and --speculate are >= 0, one at a time, and without --stateless or "
        "--stream");
  }
  auto info = client.GetModel(o.model);
  if (!info.ok()) return info.status();
  DecodeBenchReport report;
  report.embed_dim = info->embed_dim();
  Tally tally;
  const ServerCpuMeter cpu(o.server_cpu);
  const auto start = std::chrono::steady_clock::now();
  tally.start = start;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(o.sessions));
  for (int i = 0; i < o.sessions; ++i) {
    threads.emplace_back([&, i] {
      if (o.fork > 0) return RunForkedSession(client, o, report.embed_dim, i, &tally);
      if (o.speculate > 0) return RunSpeculativeSession(client, o, report.embed_dim, i, &tally);
      (o.stateless ? RunStateless : RunSession)(client, o, report.embed_dim, i, &tally);
    });
  }
  for (auto& t : threads) t.join();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Summarize(o, cpu, &tally, &report);
  return report;
}

std::string DecodeBenchReportText(const DecodeBenchOptions& o, const DecodeBenchReport& r) {
  char buf[640];
  std::snprintf(buf, sizeof(buf),
                "decode%s: %d sessions x %lld steps (B=%lld, E=%lld, prefill %lld)\n"
                "steps: %lld ok, %lld errors in %.3f s (sessions opened, prefilled and closed "
                "included)\n"
                "throughput: %.1f steps/s (%.1f tokens/s)\n"
                "step latency (us): mean %.0f  p50 %.0f  p90 %.0f  p99 %.0f  max %.0f\n",
                o.stateless ? " (stateless: whole prefix per step)" : "", o.sessions,
                static_cast<long long>(o.tokens), static_cast<long long>(o.batch),
                static_cast<long long>(r.embed_dim), static_cast<long long>(o.prefill),
                static_cast<long long>(r.steps), static_cast<long long>(r.errors), r.seconds,
                r.steps_per_s, r.tokens_per_s, r.latency.mean_us, r.latency.p50_us,
                r.latency.p90_us, r.latency.p99_us, r.latency.max_us);
  std::string text = buf;
  if (o.fork > 0) {
    std::snprintf(buf, sizeof(buf),
                  "fork: %d continuations of each session's prefix (the steps are theirs)\n",
                  o.fork);
    text += buf;
  } else if (o.speculate > 0) {
    std::snprintf(buf, sizeof(buf),
                  "speculate: each step is a round of %lld tokens appended, then 0..%lld of them "
                  "truncated (latency: both calls)\n",
                  static_cast<long long>(o.speculate), static_cast<long long>(o.speculate));
    text += buf;
  }
  if (r.kv_blocks > 0 && r.cached_tokens > 0) {
    const double slots = static_cast<double>(r.kv_blocks) * r.kv_block_tokens;
    std::snprintf(buf, sizeof(buf),
                  "kv cache at close: %lld blocks x %lld tokens for %lld tokens cached (block "
                  "waste %.2f%%; bytes per token = 2*E*dtype_size*%.4f)\n",
                  static_cast<long long>(r.kv_blocks), static_cast<long long>(r.kv_block_tokens),
                  static_cast<long long>(r.cached_tokens), 100.0 * (slots / r.cached_tokens - 1.0),
                  slots / r.cached_tokens);
    text += buf;
  }
  if (!o.stateless) {
    std::snprintf(buf, sizeof(buf),
                  "resumed: %lld sessions re-opened and replayed, %lld restored from the KV store "
                  "replayed their tail; %lld tokens replayed (replay ms: p50 %.1f  max %.1f)\n",
                  static_cast<long long>(r.resumed), static_cast<long long>(r.resynced),
                  static_cast<long long>(r.replayed_tokens), r.replay_ms_p50, r.replay_ms_max);
    text += buf;
  }
  text += ServerCpuReportText(r.server_cpu, "step");
  if (!r.first_error.empty()) text += "first error: " + r.first_error + "\n";
  return text;
}

std::string DecodeBenchReportJson(const DecodeBenchReport& r) {
  nlohmann::json j = {
      {"steps", r.steps},
      {"errors", r.errors},
      {"first_error", r.first_error},
      {"seconds", r.seconds},
      {"steps_per_s", r.steps_per_s},
      {"tokens_per_s", r.tokens_per_s},
      {"latency_us", LatencyJson(r.latency)},
      {"resumed", r.resumed},
      {"resynced", r.resynced},
      {"replayed_tokens", r.replayed_tokens},
      {"server_cpu", ServerCpuJson(r.server_cpu, "step")},
  };
  return j.dump();
}

double DecodeStepFlops(const DecodeBenchOptions& o, int64_t embed_dim) {
  const double e = static_cast<double>(embed_dim);
  const double b = static_cast<double>(o.batch);
  // Step i (1-based) attends over prefill + i tokens; the mean of i over 1..tokens.
  const double mean_len = static_cast<double>(o.prefill) + (static_cast<double>(o.tokens) + 1) / 2;
  if (o.stateless) {
    // The whole prefix [B, L, E] each step: 8*B*L*E^2 + 4*B*L*L*E (is_causal computes the full
    // square), L averaged as above (the mean of L^2 is used for the quadratic term).
    const double n = static_cast<double>(o.tokens), p = static_cast<double>(o.prefill);
    const double mean_sq = p * p + p * (n + 1) + (n + 1) * (2 * n + 1) / 6;
    return 8 * b * mean_len * e * e + 4 * b * mean_sq * e;
  }
  return 8 * b * e * e + 4 * b * mean_len * e;
}

}  // namespace mha::client
