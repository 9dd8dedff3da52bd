#include "client/bench/afd_bench.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "client/bench/afd_stream.h"
#include "client/bench/stand_in_ffn.h"

namespace mha::client {
namespace {

// Runs `fn(stream)` for every stream on its own thread; the wall time in seconds.
template <typename Fn>
double Parallel(std::vector<std::unique_ptr<AfdStream>>& streams, Fn fn) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (auto& s : streams) threads.emplace_back([&fn, &s] { fn(*s); });
  for (auto& t : threads) t.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Status CheckOptions(const AfdBenchOptions& o) {
  if (o.sessions < 1 || o.streams < 1 || o.streams > o.sessions || o.steps < 1 || o.prefill < 0 ||
      o.prefill_chunk < 0 || o.layers < 0) {
    return InvalidArgument(
        "afd: --sessions, --steps >= 1, 1 <= --streams <= --sessions, --prefill, --prefill-chunk "
        "and --layers >= 0");
  }
  if (o.ffn != "all" && o.ffn != "decode" && o.ffn != "none") {
    return InvalidArgument("afd: --ffn is all, decode or none, not '" + o.ffn + "'");
  }
  return Status::Ok();
}

Status Describe(AttentionClient& client, const AfdBenchOptions& o, AfdBenchReport* r) {
  auto info = client.GetModel(o.model);
  if (!info.ok()) return info.status();
  if (info->architecture() != "llama") {
    return FailedPrecondition(
        "afd: model '" + info->name() + "' is not a Llama model (" +
        (info->architecture().empty() ? std::string("no architecture") : info->architecture()) +
        "): LayerSteps needs one");
  }
  r->model = info->name();
  r->model_layers = info->num_layers();
  r->layers = o.layers > 0 ? std::min(o.layers, info->num_layers()) : info->num_layers();
  r->embed_dim = info->embed_dim();
  r->num_heads = info->num_heads();
  r->num_kv_heads = info->num_key_value_heads();
  r->head_dim = info->head_dim();
  return Status::Ok();
}

// The tallies of every stream into the report.
void Collect(const std::vector<std::unique_ptr<AfdStream>>& streams, AfdBenchReport* r) {
  std::vector<double> all, passes, entries, compute;
  r->per_layer.assign(static_cast<size_t>(r->layers), LatencyStats());
  std::vector<std::vector<double>> per_layer(static_cast<size_t>(r->layers));
  for (const auto& s : streams) {
    const AfdStreamTally& t = s->tally();
    r->steps += t.steps;
    r->messages += t.messages;
    r->failed_messages += t.failed_messages;
    r->failed_steps += t.failed_steps;
    r->ffn_seconds += t.ffn_seconds;
    r->output_sum += t.output_sum;
    if (!t.first_error.ok() && r->first_error.empty()) r->first_error = t.first_error.ToString();
    for (size_t l = 0; l < per_layer.size(); ++l) {
      per_layer[l].insert(per_layer[l].end(), t.round_trip_us[l].begin(), t.round_trip_us[l].end());
      all.insert(all.end(), t.round_trip_us[l].begin(), t.round_trip_us[l].end());
    }
    passes.insert(passes.end(), t.pass_messages.begin(), t.pass_messages.end());
    entries.insert(entries.end(), t.pass_entries.begin(), t.pass_entries.end());
    compute.insert(compute.end(), t.compute_us.begin(), t.compute_us.end());
  }
  for (size_t l = 0; l < per_layer.size(); ++l) r->per_layer[l] = SummarizeLatencies(per_layer[l]);
  r->all = SummarizeLatencies(std::move(all));
  r->mean_pass_messages = Mean(passes);
  r->mean_pass_entries = Mean(entries);
  r->max_pass_messages =
      passes.empty() ? 0 : static_cast<int64_t>(*std::max_element(passes.begin(), passes.end()));
  r->server_compute_mean_us = Mean(compute);
}

}  // namespace

StatusOr<AfdBenchReport> RunAfdBench(AttentionClient& client, const AfdBenchOptions& o) {
  MHA_RETURN_IF_ERROR(CheckOptions(o));
  AfdBenchReport r;
  MHA_RETURN_IF_ERROR(Describe(client, o, &r));
  std::vector<std::string> ids;
  for (int i = 0; i < o.sessions; ++i) {
    v1::OpenSessionRequest open;
    open.set_model(o.model);
    open.set_model_version(o.model_version);
    open.set_max_tokens(o.prefill + o.steps);
    auto opened = client.OpenSession(open, o.timeout);
    if (!opened.ok()) {
      for (const auto& id : ids) (void)client.CloseSession(id);
      return opened.status();
    }
    ids.push_back(opened->session_id());
  }
  const StandInFfn ffn(r.embed_dim, o.seed);
  const int64_t messages = (o.steps + 1) * r.layers;
  std::unique_ptr<inference::GRPCInferenceService::Stub> oip;  // --shm; outlives the streams
  if (o.shm) oip = inference::GRPCInferenceService::NewStub(client.channel());
  std::vector<std::unique_ptr<AfdStream>> streams;
  for (int s = 0; s < o.streams; ++s) {
    std::vector<std::string> mine;
    for (size_t i = static_cast<size_t>(s); i < ids.size(); i += static_cast<size_t>(o.streams)) {
      mine.push_back(ids[i]);
    }
    streams.push_back(std::make_unique<AfdStream>(client, std::move(mine), r.layers, ffn,
                                                  o.seed * 1000003 + static_cast<uint64_t>(s),
                                                  o.timeout, messages));
    streams.back()->set_ffn(o.ffn == "all", o.ffn != "none");
  }
  const int64_t chunk = o.prefill_chunk > 0 ? o.prefill_chunk : o.prefill;
  for (size_t s = 0; oip && s < streams.size(); ++s) {
    const Status shm =
        streams[s]->UseSharedMemory(oip.get(), std::max<int64_t>(chunk, 1), static_cast<int>(s));
    if (!shm.ok()) {
      streams.clear();
      for (const auto& id : ids) (void)client.CloseSession(id);
      return shm;
    }
  }
  r.prefill_seconds = Parallel(streams, [&](AfdStream& s) {
    for (int64_t done = 0; done < o.prefill; done += chunk) {
      s.Token(std::min(chunk, o.prefill - done), false);
    }
  });
  const ServerCpuMeter cpu(o.server_cpu);
  r.seconds = Parallel(streams, [&](AfdStream& s) {
    for (int64_t step = 0; step < o.steps; ++step) s.Token(1, true);
  });
  int64_t decode_messages = 0;  // the round trips the decode phase recorded
  for (const auto& s : streams) {
    for (const auto& layer : s->tally().round_trip_us)
      decode_messages += static_cast<int64_t>(layer.size());
  }
  r.server_cpu = cpu.Finish(decode_messages);
  for (auto& s : streams) s->Finish();
  Collect(streams, &r);
  for (const auto& id : ids) (void)client.CloseSession(id);
  r.steps_per_s = r.seconds > 0 ? static_cast<double>(r.steps) / r.seconds : 0;
  r.layer_steps_per_s = r.steps_per_s * static_cast<double>(r.layers);
  return r;
}

double AfdLayerMessageFlops(const AfdBenchReport& r, const AfdBenchOptions& o, int64_t sessions) {
  const double e = static_cast<double>(r.embed_dim), d = static_cast<double>(r.head_dim);
  const double q = static_cast<double>(r.num_heads) * d,
               kv = static_cast<double>(r.num_kv_heads) * d;
  // Decode step i (1-based) attends over prefill + i keys; the mean over the phase.
  const double keys = static_cast<double>(o.prefill) + (static_cast<double>(o.steps) + 1) / 2;
  const double per_token = 2 * e * (q + 2 * kv) + 2 * q * e + 2 * 2 * q * keys;
  return per_token * static_cast<double>(sessions);
}

std::string AfdBenchReportText(const AfdBenchOptions& o, const AfdBenchReport& r) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "afd: model %s (L=%lld, driving %lld; E=%lld H=%lld KV=%lld D=%lld), %d sessions "
                "on %d stream(s), prefill %lld + %lld steps\n"
                "steps: %lld ok, %lld failed (session tokens through every layer); layer "
                "messages: %lld ok, %lld failed\n"
                "prefill %.3f s; decode %.3f s: %.1f steps/s (%.1f layer steps/s)\n",
                r.model.c_str(), (long long)r.model_layers, (long long)r.layers,
                (long long)r.embed_dim, (long long)r.num_heads, (long long)r.num_kv_heads,
                (long long)r.head_dim, o.sessions, o.streams, (long long)o.prefill,
                (long long)o.steps, (long long)r.steps, (long long)r.failed_steps,
                (long long)r.messages, (long long)r.failed_messages, r.prefill_seconds, r.seconds,
                r.steps_per_s, r.layer_steps_per_s);
  std::string text = buf;
  text += "per-layer round trip, decode (us):\n";
  for (size_t l = 0; l < r.per_layer.size(); ++l) {
    const LatencyStats& x = r.per_layer[l];
    std::snprintf(buf, sizeof(buf),
                  "  layer %zu: p50 %.0f  p99 %.0f  mean %.0f  max %.0f  (%lld)\n", l, x.p50_us,
                  x.p99_us, x.mean_us, x.max_us, (long long)x.count);
    text += buf;
  }
  std::snprintf(buf, sizeof(buf),
                "  all layers: p50 %.0f  p99 %.0f  mean %.0f; server compute mean %.0f us\n"
                "server passes: %.2f messages (max %lld), %.1f entries each; client FFN %.3f s\n",
                r.all.p50_us, r.all.p99_us, r.all.mean_us, r.server_compute_mean_us,
                r.mean_pass_messages, (long long)r.max_pass_messages, r.mean_pass_entries,
                r.ffn_seconds);
  text += buf;
  text += ServerCpuReportText(r.server_cpu, "layer message");
  if (!r.first_error.empty()) text += "first error: " + r.first_error + "\n";
  return text;
}

std::string AfdBenchReportJson(const AfdBenchReport& r) {
  nlohmann::json layers = nlohmann::json::array();
  for (const LatencyStats& l : r.per_layer) layers.push_back(LatencyJson(l, "_us", "messages"));
  nlohmann::json j = {
      {"model", r.model},
      {"layers", r.layers},
      {"steps", r.steps},
      {"failed_steps", r.failed_steps},
      {"messages", r.messages},
      {"failed_messages", r.failed_messages},
      {"first_error", r.first_error},
      {"prefill_seconds", r.prefill_seconds},
      {"seconds", r.seconds},
      {"steps_per_s", r.steps_per_s},
      {"layer_steps_per_s", r.layer_steps_per_s},
      {"round_trip", LatencyJson(r.all, "_us")},
      {"per_layer", layers},
      {"pass_messages_mean", r.mean_pass_messages},
      {"pass_entries_mean", r.mean_pass_entries},
      {"server_compute_mean_us", r.server_compute_mean_us},
      {"ffn_seconds", r.ffn_seconds},
      {"server_cpu", ServerCpuJson(r.server_cpu, "message")},
  };
  return j.dump();
}

}  // namespace mha::client
