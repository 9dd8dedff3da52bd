#include "client/cli/commands.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "client/cli/efficiency.h"
#include "client/cli/head_commands.h"
#include "client/cli/plot_inputs.h"
#include "client/oip_translate.h"
#include "client/shm_regions.h"
#include "client/tensor_client.h"
#include "mha/loader.h"

namespace mha::client::cli {

void InfoCommands::Add(CLI::App& app) {
  list = app.add_subcommand("list", "List the models");
  info = app.add_subcommand("info", "Show one model's metadata");
  info->add_option("model", info_model, "Model name ('' = default)");
  health = app.add_subcommand("health", "grpc.health.v1 Check ('' = whole server)");
  health->add_option("service", health_service, "Service name");
}

int InfoCommands::Run(AttentionClient& client) {
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
  return -1;
}

void ForwardCommand::Add(CLI::App& app) {
  cmd = app.add_subcommand("forward", "One forward pass; prints shapes and stats");
  AddShapeFlags(cmd, &shape);
  cmd->add_option("-o,--output", output_file, "Write output (+attn_weights) as safetensors");
  AddPlotOption(cmd, &plot_file,
                "Draw the returned weights of one batch row (--plot-row) as heat maps, one per "
                "head with --per-head, masked positions and heads hatched");
  cmd->add_option("--plot-row", plot_row, "The batch row --plot draws")->capture_default_str();
  cmd->add_flag("--shm", shm,
                "Inputs and the output through shared-memory regions (mha.v1; the server needs "
                "--allow-client-shm=true; docs/shared-memory.md)");
}

namespace {

// forward --shm: `request` rewritten to name the regions `regions` creates (its inputs written
// there); `read_back` then puts the output from the region into the response's data.
struct ForwardShm {
  std::unique_ptr<inference::GRPCInferenceService::Stub> oip;  // outlives `regions`
  std::unique_ptr<ShmRegions> regions;  // unregisters through `oip` when destroyed

  Status Place(AttentionClient& client, v1::ForwardRequest* request) {
    if (client.options().protocol != WireProtocol::kNative) {
      return InvalidArgument("forward --shm: mha.v1 only (bench --shm takes --protocol oip)");
    }
    oip = inference::GRPCInferenceService::NewStub(client.channel());
    auto created = ShmRegions::CreateV1(oip.get(), {*request});
    if (!created.ok()) return created.status();
    regions = std::move(created.value());
    return regions->RewriteV1(0, request);
  }
  Status ReadBack(v1::ForwardResponse* response) const {
    v1::Tensor* out = response->mutable_output();
    const v1::SharedMemoryRef& at = out->shared_memory();
    const ShmObject& region = regions->output();
    if (at.shared_memory_region() != region.name() ||
        at.shared_memory_offset() + at.shared_memory_byte_size() > region.size()) {
      return Internal("forward --shm: the output is not in region '" + region.name() + "'");
    }
    out->set_data(region.data() + at.shared_memory_offset(), at.shared_memory_byte_size());
    out->clear_shared_memory();
    return Status::Ok();
  }
};

}  // namespace

int ForwardCommand::Run(AttentionClient& client) {
  auto request = BuildRequest(client, shape);
  if (!request.ok()) return Fail(request.status());
  ForwardShm placed;
  v1::ForwardRequest sent = *request;
  if (shm) {
    if (const Status s = placed.Place(client, &sent); !s.ok()) return Fail(s);
  }
  const auto start = std::chrono::steady_clock::now();
  std::string request_id;
  auto response = client.ForwardRaw(sent, std::nullopt, &request_id);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!response.ok()) return Fail(response.status());
  const size_t wire_bytes = response->ByteSizeLong();  // before a shared-memory output is read in
  if (shm) {
    std::printf("shared memory: inputs from region '%s', output read back from region '%s'\n",
                sent.query().shared_memory().shared_memory_region().c_str(),
                response->output().shared_memory().shared_memory_region().c_str());
    if (const Status s = placed.ReadBack(&response.value()); !s.ok()) return Fail(s);
  }
  auto result = ParseForwardResponse(*response);
  if (!result.ok()) return Fail(result.status());
  std::printf("model %s v%s  request_id %s  latency %.3f ms (queue %.3f, compute %.3f)\n",
              result->model.c_str(), result->model_version.c_str(), request_id.c_str(), ms,
              result->queue_us / 1e3, result->compute_us / 1e3);
  PrintStats("output", result->output);
  const std::pair<const char*, const at::Tensor*> returned[] = {
      {"attn_weights", &result->attn_weights},
      {"attn_weights_topk_values", &result->topk_values},
      {"attn_weights_topk_indices", &result->topk_indices},
      {"head_entropy", &result->head_entropy},
      {"head_max_weight", &result->head_max_weight}};
  for (const auto& [name, tensor] : returned) {
    if (tensor->defined()) PrintStats(name, *tensor);
  }
  PrintHeadStats(*result);
  std::printf("response: %zu bytes\n", wire_bytes);
  if (!plot_file.empty()) {
    const Status s = PlotForward(*result, *request, plot_row, plot_file);
    if (!s.ok()) return Fail(s);
  }
  if (!output_file.empty()) {
    TensorMap tensors{{"output", result->output}};
    for (const auto& [name, tensor] : returned) {
      if (tensor->defined()) tensors[name] = *tensor;
    }
    const Status s = WriteSafetensors(output_file, tensors);
    if (!s.ok()) return Fail(s);
    std::printf("wrote %s\n", output_file.c_str());
  }
  return 0;
}

namespace {

// The mean attention FLOPs of the pool's requests (each call picks one uniformly).
double MeanRequestFlops(const std::vector<v1::ForwardRequest>& requests) {
  double sum = 0;
  for (const auto& r : requests) {
    const auto& q = r.query().shape();
    if (q.size() != 3) continue;
    const bool cross = r.has_key() && r.key().shape_size() == 3 && r.value().shape_size() == 3;
    sum += AttentionFlops(q[0], q[1], cross ? r.key().shape(1) : 0, q[2],
                          cross ? r.key().shape(2) : 0, cross ? r.value().shape(2) : 0);
  }
  return requests.empty() ? 0 : sum / static_cast<double>(requests.size());
}

}  // namespace

void BenchCommand::Add(CLI::App& app) {
  cmd = app.add_subcommand("bench", "Throughput and latency (closed or open loop)");
  AddShapeFlags(cmd, &shape);
  cmd->add_option("-c,--concurrency", options.concurrency, "Calls in flight")
      ->capture_default_str();
  cmd->add_option("-d,--duration-s", options.duration_s, "Timed run length")->capture_default_str();
  cmd->add_option("-n,--requests", options.requests, "Timed requests (overrides duration)");
  cmd->add_option("--warmup", options.warmup, "Untimed requests first")->capture_default_str();
  cmd->add_flag("--json", json, "Print one JSON object");
  cmd->add_flag("--ping", options.ping,
                "Time GetModel round trips instead of Forward (transport cost alone)");
  cmd->add_option("--rate", options.rate,
                  "Open loop: send this many requests per second whatever the answers do "
                  "(0 = closed loop with --concurrency)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--arrival", arrival, "Open loop: poisson (exponential gaps) or fixed")
      ->check(CLI::IsMember({"poisson", "fixed"}))
      ->capture_default_str();
  cmd->add_option("--deadline-min-ms", options.deadline_min,
                  "With --deadline-max-ms: each call's deadline is uniform in [min, max] ms "
                  "(instead of --timeout-ms)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--deadline-max-ms", options.deadline_max, "See --deadline-min-ms")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seq-min", seq_min, "Random query length per request: smallest T");
  cmd->add_option("--seq-max", seq_max,
                  "Random query length per request: largest T (uniform in [min, max])");
  cmd->add_flag("--shm", shm,
                "Inputs and the output through shared-memory regions, over mha.v1 or --protocol "
                "oip (the server needs --allow-client-shm=true; docs/shared-memory.md)");
  AddServerCpuFlags(cmd, &options.server_cpu);
  AddPlotOption(cmd, &plot_file,
                "Draw the latency distribution (p50/p90/p99 marked) and the throughput over time");
}

// One request per query length in [seq-min, seq-max] (or just --seq); each call picks one.
StatusOr<std::vector<v1::ForwardRequest>> BenchRequests(AttentionClient& client,
                                                        const ShapeFlags& shape, int64_t* seq_min,
                                                        int64_t* seq_max) {
  if (*seq_min > 0 || *seq_max > 0) {
    if (*seq_min <= 0 || *seq_max < *seq_min) {
      return InvalidArgument("--seq-min/--seq-max: need 0 < min <= max");
    }
  } else {
    *seq_min = *seq_max = shape.seq;
  }
  std::vector<v1::ForwardRequest> requests;
  for (int64_t t = *seq_min; t <= *seq_max; ++t) {
    ShapeFlags flags = shape;
    flags.seq = t;
    if (*seq_max > *seq_min) flags.seed = shape.seed + static_cast<uint64_t>(t);
    auto request = BuildRequest(client, flags);
    if (!request.ok()) return request.status();
    requests.push_back(std::move(request.value()));
    if (!shape.input_file.empty()) break;  // inputs from a file: one request
  }
  return requests;
}

namespace {

// The text report's first line, the picture's title: "bench: B=8 T=128 S=T need_weights=0
// concurrency=2".
std::string BenchLine(const std::vector<v1::ForwardRequest>& requests, int64_t seq_min,
                      int64_t seq_max, const BenchOptions& options, const std::string& arrival) {
  const v1::ForwardRequest& first = requests.front();
  const std::string t = requests.size() > 1
                            ? std::to_string(seq_min) + ".." + std::to_string(seq_max)
                            : std::to_string(first.query().shape(1));
  char what[192];
  std::snprintf(what, sizeof(what), "bench: B=%lld T=%s S=%s need_weights=%d ",
                (long long)first.query().shape(0), t.c_str(),
                first.has_key() ? std::to_string(first.key().shape(1)).c_str() : "T",
                first.need_weights());
  std::string line = what;
  if (options.rate > 0) {
    std::snprintf(what, sizeof(what), "rate=%g/s %s", options.rate, arrival.c_str());
  } else {
    std::snprintf(what, sizeof(what), "concurrency=%d", options.concurrency);
  }
  line += what;
  return line;
}

}  // namespace

int BenchCommand::Run(AttentionClient& client, std::chrono::milliseconds timeout) {
  auto requests = BenchRequests(client, shape, &seq_min, &seq_max);
  if (!requests.ok()) return Fail(requests.status());
  options.timeout = timeout;
  options.poisson = arrival == "poisson";
  options.seed = shape.seed;
  std::unique_ptr<inference::GRPCInferenceService::Stub> oip;  // outlives `regions`
  std::unique_ptr<ShmRegions> regions;  // unregisters through `oip` when destroyed
  if (shm && client.options().protocol == WireProtocol::kNative) {
    oip = inference::GRPCInferenceService::NewStub(client.channel());
    auto created = ShmRegions::CreateV1(oip.get(), *requests);
    if (!created.ok()) return Fail(created.status());
    regions = std::move(created.value());
    options.shm = regions.get();
  } else if (shm) {
    std::vector<inference::ModelInferRequest> infer;
    for (const auto& r : *requests) {
      auto translated = ToModelInferRequest(r);
      if (!translated.ok()) return Fail(translated.status());
      infer.push_back(std::move(translated.value()));
    }
    oip = inference::GRPCInferenceService::NewStub(client.channel());
    auto created = ShmRegions::Create(oip.get(), infer);
    if (!created.ok()) return Fail(created.status());
    regions = std::move(created.value());
    options.shm = regions.get();
  }
  auto report = RunBench(client, *requests, options);
  if (report.server_cpu.measured && !options.ping) {
    FillEfficiency(&report.server_cpu, MeanRequestFlops(*requests),
                   MeasureMatmulFlopsPerCpuSecond());
  }
  const v1::ForwardRequest& first = requests->front();
  const std::string line = BenchLine(*requests, seq_min, seq_max, options, arrival);
  if (json) {
    std::printf("%s\n", BenchReportJson(report).c_str());
  } else {
    std::printf("%s\n%s", line.c_str(), BenchReportText(report).c_str());
  }
  if (!plot_file.empty()) {
    const Status s = PlotLoad(plot_file, BenchSamples(report), line,
                              "model " + (first.model().empty() ? "(default)" : first.model()) +
                                  "; each request's latency as the client saw it",
                              json ? stderr : stdout);  // --json: stdout holds the one JSON object
    if (!s.ok()) return Fail(s);
  }
  return report.ok > 0 && report.errors == 0 ? 0 : 1;
}

void LocalBenchCommand::Add(CLI::App& app) {
  cmd = app.add_subcommand(
      "local-bench", "Baseline without a server: MhaModel::Forward in this process, same shapes");
  AddShapeFlags(cmd, &shape);
  cmd->add_option("-E,--embed-dim", embed, "Embedding size")->capture_default_str();
  cmd->add_option("-H,--num-heads", heads, "Heads")->capture_default_str();
  cmd->add_option("--threads", options.threads, "Concurrent Forward loops (as workers)")
      ->capture_default_str();
  cmd->add_option("--intra-op-threads", options.intra_op_threads, "ATen threads")
      ->capture_default_str();
  cmd->add_option("--device", device,
                  "Where the model runs, as mha-server --device: cpu, cuda, cuda:N, auto "
                  "(inputs start on the host, as a served request's)")
      ->capture_default_str();
  cmd->add_option("--dtype", dtype, "Model dtype, as mha-server --dtype")->capture_default_str();
  cmd->add_option("-d,--duration-s", options.duration_s, "Timed run length")->capture_default_str();
  cmd->add_option("-n,--requests", options.requests, "Timed passes (overrides duration)");
  cmd->add_flag("--json", json, "Print one JSON object");
}

int LocalBenchCommand::Run() {
  auto model = MakeLocalModel(embed, heads, 0, 0, device, dtype);
  if (!model.ok()) return Fail(model.status());
  auto gen = at::make_generator<at::CPUGeneratorImpl>(shape.seed);
  ForwardInputs in;
  in.query = at::randn({shape.batch, shape.seq, embed}, gen);
  if (shape.kv_seq > 0) {
    in.key = at::randn({shape.batch, shape.kv_seq, embed}, gen);
    in.value = at::randn({shape.batch, shape.kv_seq, embed}, gen);
  }
  in.is_causal = shape.causal;
  in.need_weights = shape.need_weights;
  in.average_attn_weights = !shape.per_head;
  const auto report = RunLocalBench(**model, in, options);
  if (json) {
    std::printf("%s\n", BenchReportJson(report).c_str());
  } else {
    std::printf("local-bench (in-process, %s %s): B=%lld T=%lld E=%lld H=%lld threads=%d\n%s",
                (*model)->device().c_str(), DTypeName((*model)->options().dtype),
                (long long)shape.batch, (long long)shape.seq, (long long)embed, (long long)heads,
                options.threads, BenchReportText(report).c_str());
  }
  return report.ok > 0 && report.errors == 0 ? 0 : 1;
}

}  // namespace mha::client::cli
