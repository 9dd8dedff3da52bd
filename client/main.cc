// mha-client: command-line client for mha-server.
//   mha-client [--target HOST:PORT] list | info MODEL | health [SERVICE] | forward ... | bench ...
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <sstream>

#include "bench_runner.h"
#include "local_bench.h"
#include "mha/loader.h"
#include "mha_client.h"
#include "tensor_codec.h"

namespace {

using mha::client::AttentionClient;

struct ShapeFlags {
  std::string model;
  int64_t batch = 8, seq = 128, kv_seq = 0;  // kv_seq 0 = self-attention
  bool need_weights = false, per_head = false, causal = false;
  std::string output_dtype;
  uint64_t seed = 0;
  std::string input_file;
};

void AddShapeFlags(CLI::App* cmd, ShapeFlags* f) {
  cmd->add_option("-m,--model", f->model, "Model name (default: the server's default model)");
  cmd->add_option("-b,--batch", f->batch, "Batch size B")->capture_default_str();
  cmd->add_option("-t,--seq", f->seq, "Query length T")->capture_default_str();
  cmd->add_option("-s,--kv-seq", f->kv_seq, "Key/value length S; 0 = self-attention")
      ->capture_default_str();
  cmd->add_flag("-w,--need-weights", f->need_weights, "Ask for attention weights");
  cmd->add_flag("--per-head", f->per_head,
                "Per-head weights [B,H,T,S] (average_attn_weights=false)");
  cmd->add_flag("--causal", f->causal, "is_causal");
  cmd->add_option("--output-dtype", f->output_dtype, "float32, float16 or bfloat16");
  cmd->add_option("--seed", f->seed, "Seed of the random inputs")->capture_default_str();
  cmd->add_option("-i,--input", f->input_file,
                  "Inputs from a safetensors file (query, key, value, key_padding_mask, attn_mask) "
                  "instead of random ones");
}

int Fail(const mha::Status& status) {
  std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
  return 1;
}

// Builds the request of `forward` and `bench`.
mha::StatusOr<mha::v1::ForwardRequest> BuildRequest(AttentionClient& client, const ShapeFlags& f) {
  mha::ForwardInputs in;
  if (!f.input_file.empty()) {
    auto tensors = mha::ReadSafetensors(f.input_file);
    if (!tensors.ok()) return tensors.status();
    auto get = [&](const char* key) {
      auto it = tensors->find(key);
      return it == tensors->end() ? at::Tensor() : it->second;
    };
    in.query = get("query");
    in.key = get("key");
    in.value = get("value");
    in.key_padding_mask = get("key_padding_mask");
    in.attn_mask = get("attn_mask");
    if (!in.query.defined()) return mha::InvalidArgument(f.input_file + " has no 'query' tensor");
  } else {
    auto info = client.GetModel(f.model);
    if (!info.ok()) return info.status();
    auto gen = at::make_generator<at::CPUGeneratorImpl>(f.seed);
    in.query = at::randn({f.batch, f.seq, info->embed_dim()}, gen);
    if (f.kv_seq > 0) {
      in.key = at::randn({f.batch, f.kv_seq, info->kdim()}, gen);
      in.value = at::randn({f.batch, f.kv_seq, info->vdim()}, gen);
    }
  }
  in.is_causal = f.causal;
  in.need_weights = f.need_weights;
  in.average_attn_weights = !f.per_head;
  mha::client::ForwardOptions options;
  options.model = f.model;
  if (!f.output_dtype.empty()) {
    auto dtype = mha::ParseDType(f.output_dtype);
    if (!dtype.ok()) return dtype.status();
    options.output_dtype = mha::codec::ToProtoDType(*dtype);
  }
  return mha::client::MakeForwardRequest(in, options);
}

void PrintStats(const char* name, const at::Tensor& t) {
  const at::Tensor f = t.to(at::kDouble);
  const at::Tensor finite = f.masked_select(at::isfinite(f));
  std::ostringstream shape;
  shape << t.sizes();
  std::printf("%s: shape %s dtype %s  mean %.6g std %.6g min %.6g max %.6g  non-finite %lld\n",
              name, shape.str().c_str(), c10::toString(t.scalar_type()),
              finite.numel() ? finite.mean().item<double>() : 0.0,
              finite.numel() > 1 ? finite.std().item<double>() : 0.0,
              finite.numel() ? finite.min().item<double>() : 0.0,
              finite.numel() ? finite.max().item<double>() : 0.0,
              static_cast<long long>(f.numel() - finite.numel()));
}

std::string StateName(int state) { return mha::v1::ModelState_Name(state); }

void PrintModel(const mha::v1::ModelInfo& m) {
  std::printf("%s%s v%s %s", m.name().c_str(), m.is_default() ? " (default)" : "",
              m.version().c_str(), StateName(m.state()).c_str());
  if (m.state() == mha::v1::FAILED) {
    std::printf(": %s\n", m.error().c_str());
    return;
  }
  std::printf(
      ": E=%lld H=%lld head_dim=%lld kdim=%lld vdim=%lld bias=%d add_bias_kv=%d "
      "add_zero_attn=%d dtype=%s compute=%s device=%s format=%s layout=%s params=%lld\n"
      "    source %s\n",
      (long long)m.embed_dim(), (long long)m.num_heads(), (long long)m.head_dim(),
      (long long)m.kdim(), (long long)m.vdim(), m.bias(), m.add_bias_kv(), m.add_zero_attn(),
      mha::codec::DataTypeName(m.dtype()).c_str(),
      mha::codec::DataTypeName(m.compute_dtype()).c_str(), m.device().c_str(), m.format().c_str(),
      m.layout().c_str(), (long long)m.parameter_count(), m.source().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mha-client: talk to mha-server (mha.v1.AttentionService)"};
  app.require_subcommand(1);
  mha::client::ClientOptions client_options;
  int64_t timeout_ms = 30000;
  app.add_option("-a,--target", client_options.target,
                 "Server address host:port, or several: ipv4:A:P,B:P or dns:///NAME:P")
      ->envname("MHA_TARGET")
      ->capture_default_str();
  app.add_option("--lb", client_options.channel.lb,
                 "round_robin or pick_first (default: round_robin for several addresses or dns:)")
      ->check(CLI::IsMember({"round_robin", "pick_first"}));
  app.add_option("--timeout-ms", timeout_ms, "Deadline of each call")->capture_default_str();

  auto* list = app.add_subcommand("list", "List the models");
  std::string info_model;
  auto* info = app.add_subcommand("info", "Show one model's metadata");
  info->add_option("model", info_model, "Model name ('' = default)");
  std::string health_service;
  auto* health = app.add_subcommand("health", "grpc.health.v1 Check ('' = whole server)");
  health->add_option("service", health_service, "Service name");

  ShapeFlags fwd;
  std::string output_file;
  auto* forward = app.add_subcommand("forward", "One forward pass; prints shapes and stats");
  AddShapeFlags(forward, &fwd);
  forward->add_option("-o,--output", output_file, "Write output (+attn_weights) as safetensors");

  ShapeFlags bf;
  mha::client::BenchOptions bench_options;
  bool json = false;
  auto* bench = app.add_subcommand("bench", "Throughput and latency (closed or open loop)");
  AddShapeFlags(bench, &bf);
  bench->add_option("-c,--concurrency", bench_options.concurrency, "Calls in flight")
      ->capture_default_str();
  bench->add_option("-d,--duration-s", bench_options.duration_s, "Timed run length")
      ->capture_default_str();
  bench->add_option("-n,--requests", bench_options.requests, "Timed requests (overrides duration)");
  bench->add_option("--warmup", bench_options.warmup, "Untimed requests first")
      ->capture_default_str();
  bench->add_flag("--json", json, "Print one JSON object");
  bench->add_flag("--ping", bench_options.ping,
                  "Time GetModel round trips instead of Forward (transport cost alone)");
  bench
      ->add_option("--rate", bench_options.rate,
                   "Open loop: send this many requests per second whatever the answers do "
                   "(0 = closed loop with --concurrency)")
      ->check(CLI::NonNegativeNumber);
  std::string arrival = "poisson";
  bench->add_option("--arrival", arrival, "Open loop: poisson (exponential gaps) or fixed")
      ->check(CLI::IsMember({"poisson", "fixed"}))
      ->capture_default_str();
  int64_t seq_min = 0, seq_max = 0;
  bench->add_option("--seq-min", seq_min, "Random query length per request: smallest T");
  bench->add_option("--seq-max", seq_max,
                    "Random query length per request: largest T (uniform in [min, max])");

  ShapeFlags lf;
  mha::client::LocalBenchOptions local_options;
  int64_t local_embed = 512, local_heads = 8;
  auto* local = app.add_subcommand(
      "local-bench", "Baseline without a server: MhaModel::Forward in this process, same shapes");
  AddShapeFlags(local, &lf);
  local->add_option("-E,--embed-dim", local_embed, "Embedding size")->capture_default_str();
  local->add_option("-H,--num-heads", local_heads, "Heads")->capture_default_str();
  local->add_option("--threads", local_options.threads, "Concurrent Forward loops (as workers)")
      ->capture_default_str();
  local->add_option("--intra-op-threads", local_options.intra_op_threads, "ATen threads")
      ->capture_default_str();
  local->add_option("-d,--duration-s", local_options.duration_s, "Timed run length")
      ->capture_default_str();
  local->add_option("-n,--requests", local_options.requests, "Timed passes (overrides duration)");
  local->add_flag("--json", json, "Print one JSON object");

  CLI11_PARSE(app, argc, argv);
  client_options.timeout = std::chrono::milliseconds(timeout_ms);
  if (*local) {
    auto model = mha::client::MakeLocalModel(local_embed, local_heads, 0, 0);
    if (!model.ok()) return Fail(model.status());
    auto gen = at::make_generator<at::CPUGeneratorImpl>(lf.seed);
    mha::ForwardInputs in;
    in.query = at::randn({lf.batch, lf.seq, local_embed}, gen);
    if (lf.kv_seq > 0) {
      in.key = at::randn({lf.batch, lf.kv_seq, local_embed}, gen);
      in.value = at::randn({lf.batch, lf.kv_seq, local_embed}, gen);
    }
    in.is_causal = lf.causal;
    in.need_weights = lf.need_weights;
    in.average_attn_weights = !lf.per_head;
    const auto report = mha::client::RunLocalBench(**model, in, local_options);
    if (json) {
      std::printf("%s\n", mha::client::BenchReportJson(report).c_str());
    } else {
      std::printf("local-bench (in-process): B=%lld T=%lld E=%lld H=%lld threads=%d\n%s",
                  (long long)lf.batch, (long long)lf.seq, (long long)local_embed,
                  (long long)local_heads, local_options.threads,
                  mha::client::BenchReportText(report).c_str());
    }
    return report.ok > 0 && report.errors == 0 ? 0 : 1;
  }
  AttentionClient client(client_options);

  if (*list) {
    auto models = client.ListModels();
    if (!models.ok()) return Fail(models.status());
    for (const auto& m : models->models()) PrintModel(m);
    return 0;
  }
  if (*info) {
    auto m = client.GetModel(info_model);
    if (!m.ok()) return Fail(m.status());
    PrintModel(*m);
    return 0;
  }
  if (*health) {
    auto s = client.CheckHealth(health_service);
    if (!s.ok()) return Fail(s.status());
    std::printf("%s\n", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(*s).c_str());
    return *s == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 3;
  }
  if (*forward) {
    auto request = BuildRequest(client, fwd);
    if (!request.ok()) return Fail(request.status());
    const auto start = std::chrono::steady_clock::now();
    std::string request_id;
    auto response = client.ForwardRaw(*request, std::nullopt, &request_id);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!response.ok()) return Fail(response.status());
    auto result = mha::client::ParseForwardResponse(*response);
    if (!result.ok()) return Fail(result.status());
    std::printf("model %s v%s  request_id %s  latency %.3f ms (queue %.3f, compute %.3f)\n",
                result->model.c_str(), result->model_version.c_str(), request_id.c_str(), ms,
                result->queue_us / 1e3, result->compute_us / 1e3);
    PrintStats("output", result->output);
    if (result->attn_weights.defined()) PrintStats("attn_weights", result->attn_weights);
    if (!output_file.empty()) {
      mha::TensorMap tensors{{"output", result->output}};
      if (result->attn_weights.defined()) tensors["attn_weights"] = result->attn_weights;
      const mha::Status s = mha::WriteSafetensors(output_file, tensors);
      if (!s.ok()) return Fail(s);
      std::printf("wrote %s\n", output_file.c_str());
    }
    return 0;
  }
  if (*bench) {
    // One request per query length in [seq-min, seq-max] (or just --seq); each call picks one.
    if (seq_min > 0 || seq_max > 0) {
      if (seq_min <= 0 || seq_max < seq_min) {
        return Fail(mha::InvalidArgument("--seq-min/--seq-max: need 0 < min <= max"));
      }
    } else {
      seq_min = seq_max = bf.seq;
    }
    std::vector<mha::v1::ForwardRequest> requests;
    for (int64_t t = seq_min; t <= seq_max; ++t) {
      ShapeFlags flags = bf;
      flags.seq = t;
      if (seq_max > seq_min) flags.seed = bf.seed + static_cast<uint64_t>(t);
      auto request = BuildRequest(client, flags);
      if (!request.ok()) return Fail(request.status());
      requests.push_back(std::move(request.value()));
      if (!bf.input_file.empty()) break;  // inputs from a file: one request
    }
    bench_options.timeout = client_options.timeout;
    bench_options.poisson = arrival == "poisson";
    bench_options.seed = bf.seed;
    const auto report = mha::client::RunBench(client, requests, bench_options);
    const mha::v1::ForwardRequest& first = requests.front();
    if (json) {
      std::printf("%s\n", mha::client::BenchReportJson(report).c_str());
    } else {
      const std::string t = requests.size() > 1
                                ? std::to_string(seq_min) + ".." + std::to_string(seq_max)
                                : std::to_string(first.query().shape(1));
      char load[96];
      if (bench_options.rate > 0) {
        std::snprintf(load, sizeof(load), "rate=%g/s %s", bench_options.rate, arrival.c_str());
      } else {
        std::snprintf(load, sizeof(load), "concurrency=%d", bench_options.concurrency);
      }
      std::printf("bench: B=%lld T=%s S=%s need_weights=%d %s\n%s",
                  (long long)first.query().shape(0), t.c_str(),
                  first.has_key() ? std::to_string(first.key().shape(1)).c_str() : "T",
                  first.need_weights(), load, mha::client::BenchReportText(report).c_str());
    }
    return report.ok > 0 && report.errors == 0 ? 0 : 1;
  }
  return 0;
}
