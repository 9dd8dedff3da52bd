#include "server/app/config.h"

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "mha/kv_cache_dtype.h"
#include "mha/options.h"
#include "server/serving/sessions/session_spill.h"

namespace mha::serve {
namespace {

// --max-queue-size -> MHA_MAX_QUEUE_SIZE
std::string EnvName(const std::string& flag) {
  std::string env = "MHA_";
  for (char c : flag.substr(flag.find_first_not_of('-'))) {
    env += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return env;
}

template <typename T>
CLI::Option* Add(CLI::App& app, const std::string& flag, T* value, const std::string& help) {
  return app.add_option(flag, *value, help)->envname(EnvName(flag))->capture_default_str();
}

// A flag whose text the serving core parses (an enum name): validated by that one parser, stored
// as the enum, its default shown from the enum's current value.
template <typename Enum>
CLI::Option* AddEnum(CLI::App& app, const std::string& flag, Enum* value, const std::string& help,
                     StatusOr<Enum> (*parse)(const std::string&), const char* (*name)(Enum)) {
  auto* option = app.add_option_function<std::string>(
      flag, [value, parse](const std::string& text) { *value = parse(text).value(); }, help);
  option
      ->check(
          [parse](const std::string& text) {
            auto parsed = parse(text);
            return parsed.ok() ? std::string() : parsed.status().message();
          },
          "", "")
      ->envname(EnvName(flag))
      ->default_str(name(*value));
  return option;
}

void AddServingFlags(CLI::App& app, ServerConfig* c);
void AddLimitFlags(CLI::App& app, ServerConfig* c);
void AddBatchingFlags(CLI::App& app, ServerConfig* c);
void AddOperationFlags(CLI::App& app, ServerConfig* c);
void AddLifecycleFlags(CLI::App& app, ServerConfig* c);
void AddSessionFlags(CLI::App& app, ServerConfig* c);
void AddKvStoreFlags(CLI::App& app, ServerConfig* c);

}  // namespace

int ServerConfig::ResolvedInstances() const {
  if (instances > 0) return instances;
  if (deprecated_workers > 0) return deprecated_workers;
  if (core.batching) return 1;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, intra_op_threads));
}

StatusOr<ServerCoreOptions> CoreOptionsFrom(const ServerConfig& c) {
  ServerCoreOptions o = c.core;
  if (!c.dtype.empty()) {
    auto dtype = ParseDType(c.dtype);
    if (!dtype.ok()) return InvalidArgument("--dtype: " + dtype.status().message());
    o.overrides.dtype = *dtype;
  }
  if (!c.device.empty()) o.overrides.device = c.device;
  auto kv_dtype = ParseKvCacheDtype(c.kv_cache_dtype, "--kv-cache-dtype");
  if (!kv_dtype.ok()) return kv_dtype.status();
  o.overrides.kv_cache_dtype = *kv_dtype;
  if (c.deprecated_workers >= 0) {
    spdlog::warn(
        "--workers (MHA_WORKERS) is deprecated: use --instances (MHA_INSTANCES), the same "
        "setting, batching on or off");
  }
  o.batcher.instances = c.ResolvedInstances();
  if (!o.startup_models.empty() && o.model_control != ModelControlMode::kExplicit) {
    return InvalidArgument("--load-model needs --model-control-mode explicit");
  }
  MHA_RETURN_IF_ERROR(CheckSpillDir(o.sessions));
  return o;
}

std::optional<int> ParseServerConfig(int argc, char** argv, ServerConfig* c) {
  CLI::App app{
      "mha-server: batched multi-head-attention forward passes over gRPC "
      "(mha.v1.AttentionService, inference.GRPCInferenceService, grpc.health.v1.Health)"};
  // CLI11 reads the config file before the environment, so MHA_CONFIG becomes the default name.
  const char* config_env = std::getenv("MHA_CONFIG");
  app.set_config("--config", config_env ? config_env : "",
                 "Read flags from a TOML/INI file (key = value, flag names) (Env:MHA_CONFIG)");
  app.get_formatter()->column_width(36);
  AddServingFlags(app, c);
  AddLimitFlags(app, c);
  AddBatchingFlags(app, c);
  AddOperationFlags(app, c);
  AddLifecycleFlags(app, c);
  AddSessionFlags(app, c);
  AddKvStoreFlags(app, c);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return std::nullopt;
}

namespace {

void AddServingFlags(CLI::App& app, ServerConfig* c) {
  Add(app, "--grpc-address", &c->grpc_address,
      "Listen address host:port; port 0 picks a free port (logged, and written to --port-file)");
  Add(app, "--model-repository", &c->core.model_repository,
      "Folder of models, one sub-folder per model: <name>/{config.json, <version>/model.*} or "
      "<name>/{config.json, model.*} (= version 1). Empty = serve the built-in deterministic "
      "model 'default' (E=512, H=8)");
  Add(app, "--default-model", &c->core.default_model,
      "Model used when a request names none (default: the only model, if there is one)");
  Add(app, "--device", &c->device, "cpu, cuda, cuda:N or auto; empty = each model's config.json");
  Add(app, "--cuda-graphs", &c->core.overrides.cuda_graphs,
      "On a GPU, capture each small output-only pass shape (batch padded to a power of two, at "
      "most 4096 tokens, 32 shapes a model) once as a CUDA graph and replay it; false = always "
      "eager");
  Add(app, "--dtype", &c->dtype,
      "float32, float16 or bfloat16 for every model; empty = each model's config.json");
  Add(app, "--intra-op-threads", &c->intra_op_threads,
      "ATen's own threads (elementwise ops, softmax) per forward pass; 1 is best on small boxes. "
      "GEMMs run on OpenBLAS's threads, which this does not reach: see --blas-threads")
      ->check(CLI::Range(1, 256));
  Add(app, "--blas-threads", &c->core.batcher.blas.threads,
      "OpenBLAS threads per forward pass. 0 = auto: all cores for a pass that is the only work "
      "(one request, nothing queued, no other pass running), 1 under load (OpenBLAS's idle threads "
      "spin and take cores from the rest); N = every pass N; -1 = leave OpenBLAS's setting "
      "(OPENBLAS_NUM_THREADS) alone")
      ->check(CLI::Range(-1, 256));
  Add(app, "--device-wait", &c->device_wait,
      "On a GPU, how a worker waits for its pass: spin (CUDA's default: the least latency, a core "
      "busy for the whole wait) or block (it sleeps until the GPU is done, and small copies go "
      "through pinned buffers: the core free for other requests, a wake-up per wait)")
      ->check(CLI::IsMember({"spin", "block"}));
  Add(app, "--inter-op-threads", &c->inter_op_threads, "ATen inter-op threads")
      ->check(CLI::Range(1, 256));
  // -1 (not given) is only the default: a given value is checked as main's --workers was.
  Add(app, "--workers", &c->deprecated_workers,
      "Deprecated: --instances (this old name of it logs a warning)")
      ->check(CLI::Range(0, 1024));
  Add(app, "--tls-cert-file", &c->tls_cert_file,
      "gRPC TLS: server certificate chain (PEM); with --tls-key-file. Empty = plaintext");
  Add(app, "--tls-key-file", &c->tls_key_file,
      "gRPC TLS: private key (PEM, unencrypted) of --tls-cert-file");
  Add(app, "--tls-client-ca-file", &c->tls_client_ca_file,
      "gRPC mTLS: CA bundle (PEM); clients must present a certificate it signed");
}

void AddLimitFlags(CLI::App& app, ServerConfig* c) {
  Add(app, "--max-queue-size", &c->core.batcher.max_queue_size,
      "Requests waiting for a worker (per model when batching; config.json: max_queue_size); "
      "more are refused with RESOURCE_EXHAUSTED")
      ->check(CLI::Range(size_t{1}, size_t{1} << 30));
  Add(app, "--max-batch-size", &c->core.limits.max_batch_size,
      "Largest batch B per request (RESOURCE_EXHAUSTED above)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  Add(app, "--max-sequence-length", &c->core.limits.max_sequence_length,
      "Largest T and S per request (RESOURCE_EXHAUSTED above)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  Add(app, "--max-message-bytes", &c->max_message_bytes,
      "Largest request message (RESOURCE_EXHAUSTED above); gRPC's own receive limit is set a "
      "little higher so that the answer can say why")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 30));
  Add(app, "--max-response-bytes", &c->core.limits.max_response_bytes,
      "Largest response (output + attention weights), estimated from the shapes before any "
      "compute (RESOURCE_EXHAUSTED above); at most 2 GiB - 1 MiB (protobuf's limit)")
      ->check(CLI::Range(int64_t{1024}, (int64_t{2} << 30) - (int64_t{1} << 20)));
  Add(app, "--max-work-bytes", &c->core.limits.max_work_bytes,
      "Largest estimated working memory of one forward pass (projections, scores, masks, "
      "weights, the encoded response); RESOURCE_EXHAUSTED above; a merged batch stays under it")
      ->check(CLI::Range(int64_t{1} << 20, int64_t{1} << 50));
  Add(app, "--stream-window", &c->stream_window,
      "Requests of one ForwardStream in flight at once (answers still come in order)")
      ->check(CLI::Range(1, 1024));
  Add(app, "--allow-client-shm", &c->allow_client_shm,
      "Let clients register system shared-memory regions (Triton's shared-memory extension, "
      "docs/shared-memory.md); with --admin-token-file registration needs the token")
      ->default_str("false");
  Add(app, "--grpc-reflection", &c->grpc_reflection,
      "Serve gRPC server reflection (grpc.reflection.v1alpha: the services and their .proto "
      "descriptors, for grpcurl and Postman without .proto files)")
      ->default_str("true");
  Add(app, "--max-shm-bytes", &c->max_shm_bytes,
      "Bytes of client shared memory mapped at once (registration above it: RESOURCE_EXHAUSTED)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 50));
}

void AddBatchingFlags(CLI::App& app, ServerConfig* c) {
  Add(app, "--batching", &c->core.batching,
      "Dynamic batching: merge concurrent requests of a model into one forward pass, and a "
      "stack's layer steps of one layer into one pass (on/off; off: one request or message per "
      "pass)");
  Add(app, "--max-batch-rows", &c->core.batcher.max_batch_rows,
      "Batching: rows (sum of the requests' B) per forward pass (config.json: max_batch_rows)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  Add(app, "--max-batch-tokens", &c->core.batcher.max_batch_tokens,
      "Batching: tokens per merged pass: padded tokens of a one-layer model's pass, new tokens of "
      "a stack's layer-step pass (config.json: max_batch_tokens)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  Add(app, "--max-queue-delay-us", &c->core.batcher.max_queue_delay_us,
      "Batching: how long the oldest request may wait for others (config.json: "
      "max_queue_delay_us)")
      ->check(CLI::Range(int64_t{0}, int64_t{60000000}));
  Add(app, "--instances", &c->instances,
      "Concurrent forward passes (worker threads) per model, batching on or off (config.json: "
      "instances); 0 = 1 with batching, cores / intra-op threads without. Keep 1 when BLAS "
      "threads each GEMM itself (OpenBLAS): more oversubscribe the cores")
      ->check(CLI::Range(0, 256));
}

void AddOperationFlags(CLI::App& app, ServerConfig* c) {
  Add(app, "--metrics-address", &c->metrics_address,
      "HTTP host:port for /metrics, /healthz, /readyz; port 0 picks one (written to "
      "--metrics-port-file); empty = no endpoint");
  Add(app, "--metrics-port-file", &c->metrics_port_file,
      "Write the metrics port to this file once the endpoint listens");
  Add(app, "--http-address", &c->http_address,
      "KServe v2 HTTP/REST host:port (/v2/...: health, metadata, config, stats, infer with JSON "
      "or binary tensors); HTTPS with --tls-cert-file/--tls-key-file; port 0 picks one "
      "(written to --http-port-file); empty = off");
  Add(app, "--http-port-file", &c->http_port_file,
      "Write the HTTP/REST port to this file once the endpoint listens");
  Add(app, "--http-threads", &c->http_threads,
      "HTTP/REST connections served at once (a thread each, also while a slow client sends); "
      "more wait for a free thread")
      ->check(CLI::Range(4, 4096));
  Add(app, "--forward-threads", &c->forward_threads,
      "Threads taking every gRPC call (mha.v1, OIP, health, reflection) from the server's one "
      "completion queue (gRPC's completion-queue API, one thread at a time waiting for calls; a "
      "pass may run on the thread that took its call, which hands the queue to another first); "
      "0 = the machine's cores, at least 2")
      ->check(CLI::Range(0, 1024));
  Add(app, "--log-format", &c->log_format, "text or json (one JSON object per line)")
      ->check(CLI::IsMember({"text", "json"}));
  Add(app, "--log-level", &c->log_level,
      "trace, debug (one line per request), info, warn, error, critical or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  Add(app, "--grace-period-s", &c->grace_period_s,
      "On SIGTERM/SIGINT: seconds to finish in-flight calls before cancelling them")
      ->check(CLI::Range(0.0, 3600.0));
  Add(app, "--port-file", &c->port_file,
      "Write the bound port to this file once the server is SERVING");
  // Test-only: sleep before loading the models so the NOT_SERVING window can be observed.
  Add(app, "--debug-load-delay-ms", &c->debug_load_delay_ms, "(test only) delay model loading")
      ->check(CLI::Range(int64_t{0}, int64_t{600000}))
      ->group("");
}

void AddSessionFlags(CLI::App& app, ServerConfig* c) {
  Add(app, "--kv-cache-bytes", &c->core.sessions.pool.capacity_bytes,
      "Decoding sessions: bytes of each model version's KV cache pool (keys + values of every "
      "block; allocated at the version's first OpenSession)")
      ->check(CLI::Range(int64_t{1} << 10, int64_t{1} << 50));
  Add(app, "--kv-cache-dtype", &c->kv_cache_dtype,
      "Decoding sessions: how each model version's KV cache stores keys and values, unless its "
      "config.json says (kv_cache_dtype): model (its compute dtype), fp32, bf16, fp16, int8 (a "
      "scale and zero per token and K/V head: ~3.5x the tokens of fp32 per byte at head_dim 64), "
      "fp8_e4m3 (CUDA, LibTorch >= 2.1); docs/kv_cache_dtypes.md gives the accuracy of each");
  Add(app, "--kv-block-tokens", &c->core.sessions.pool.block_tokens,
      "Decoding sessions: tokens per KV cache block (a session grows block by block)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  Add(app, "--session-idle-timeout-s", &c->core.sessions.idle_timeout_s,
      "Decoding sessions: a session idle this long ends (NOT_FOUND 'expired'); 0 = never")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 31));
  AddEnum(app, "--kv-cache-full-policy", &c->core.sessions.full_policy,
          "Decoding sessions, when the KV cache pool is full: refuse (RESOURCE_EXHAUSTED for "
          "the new session or the step), evict-lru (end idle sessions, least recently used "
          "first) or spill (move idle sessions' KV blocks to --kv-spill-dir, or host memory for "
          "a pool on a GPU, least recently used first; they come back at their next step)",
          &ParseKvFullPolicy, &KvFullPolicyName);
  Add(app, "--kv-spill-dir", &c->core.sessions.spill_dir,
      "Decoding sessions, --kv-cache-full-policy spill with a pool on the CPU: spilled sessions' "
      "files go here, one subdirectory per model version (removed at unload and shutdown); "
      "checked writable at startup");
  Add(app, "--kv-spill-bytes", &c->core.sessions.spill_bytes,
      "Decoding sessions, --kv-cache-full-policy spill: bytes each model version may spill (a "
      "session that would exceed it is evicted)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 50));
}

// The shared KV tier (docs/scale-out.md): checked when the core starts (KvTier::Create: the URL and
// the password source, with their flags named).
void AddKvStoreFlags(CLI::App& app, ServerConfig* c) {
  KvTierOptions* kv = &c->core.kv_store;
  Add(app, "--kv-store", &kv->url,
      "Decoding sessions in a shared KV store, redis://host:port[/db]: sessions outlive this "
      "replica (handed over on drain and when another replica asks; restored on any replica). "
      "Empty = sessions live in this process only");
  Add(app, "--kv-store-password-file", &kv->password.file,
      "--kv-store: the password (AUTH) is the first line of this file");
  Add(app, "--kv-store-password-env", &kv->password.env,
      "--kv-store: the password (AUTH) is in this environment variable (its name)");
  Add(app, "--kv-store-write-behind", &kv->write_behind,
      "--kv-store: write each KV block once it is full (off the step's path, a bounded queue), so "
      "that a lost replica costs at most one block per row; off = sessions are written when they "
      "are handed over");
  Add(app, "--kv-store-write-queue", &kv->write_queue,
      "--kv-store-write-behind: writes waiting at most (a full queue refuses; the session is "
      "written again when the store catches up)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  Add(app, "--kv-store-timeout-ms", &kv->timeout_ms,
      "--kv-store: bound on a connect and on each command")
      ->check(CLI::Range(int64_t{1}, int64_t{600000}));
  Add(app, "--kv-store-lease-ms", &kv->lease_ms,
      "--kv-store: a session's ownership lease (renewed every third of it); a lost replica's "
      "sessions are taken over when it expires")
      ->check(CLI::Range(int64_t{100}, int64_t{3600000}));
  Add(app, "--kv-store-handover-timeout-ms", &kv->handover_timeout_ms,
      "--kv-store: how long a call for a session another replica holds waits for its release "
      "(UNAVAILABLE after it)")
      ->check(CLI::Range(int64_t{1}, int64_t{3600000}));
  Add(app, "--kv-store-required", &kv->required,
      "--kv-store: fail the start when the store is unreachable or refuses the password (else "
      "start degraded: sessions serve from memory until it answers)");
  Add(app, "--kv-store-prefix", &kv->prefix, "--kv-store: prefix of every key and channel");
}

void AddLifecycleFlags(CLI::App& app, ServerConfig* c) {
  AddEnum(app, "--model-control-mode", &c->core.model_control,
          "none: models load at start only; poll: the repository is rescanned every "
          "--repository-poll-secs and new, changed and removed versions are loaded/unloaded; "
          "explicit: LoadModel/UnloadModel RPCs (mha.v1.ModelControlService)",
          &ParseModelControlMode, &ModelControlModeName);
  std::chrono::milliseconds* poll = &c->core.poll_interval;
  app.add_option_function<double>(
         "--repository-poll-secs",
         [poll](double secs) {
           *poll = std::chrono::milliseconds(static_cast<int64_t>(secs * 1000));
         },
         "Poll mode: seconds between repository scans (each reads every file to hash it)")
      ->check(CLI::Range(0.05, 86400.0))
      ->envname(EnvName("--repository-poll-secs"))
      ->default_str(CLI::detail::to_string(static_cast<double>(poll->count()) / 1000));
  Add(app, "--load-model", &c->core.startup_models,
      "Explicit mode: model loaded at start (repeat the flag; none = every model)")
      ->delimiter(',');
  Add(app, "--admin-token-file", &c->admin_token_file,
      "Model control RPCs need 'authorization: Bearer <token>' metadata with the token in this "
      "file (first line); inference RPCs never do. Empty = no token");
}

}  // namespace
}  // namespace mha::serve
