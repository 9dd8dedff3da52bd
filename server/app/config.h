// mha-server flags. Every flag can also come from the environment as MHA_<FLAG_NAME>
// (--max-queue-size -> MHA_MAX_QUEUE_SIZE) and from a TOML/INI file given with --config
// (key = value, keys are the flag names without dashes, e.g. max-queue-size = 16).
// Precedence: command line > --config file > environment > default.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mha::serve {

struct ServerConfig {
  std::string grpc_address = "0.0.0.0:8500";
  std::string model_repository;  // "" = the built-in default model
  std::string default_model;
  std::string device;  // "" = each model's config.json (else "auto")
  std::string dtype;   // "" = each model's config.json (else float32)
  int intra_op_threads = 1;
  int inter_op_threads = 1;
  // 1: OpenBLAS already threads each GEMM over every core; measured on 2 cores, B=8 T=128:
  // 2 workers = 26 req/s, 1 worker = 37 req/s. 0 = cores / intra-op threads.
  int workers = 1;
  int64_t max_queue_size = 64;
  int64_t max_batch_size = 64;
  int64_t max_sequence_length = 4096;
  int64_t max_message_bytes = 64ll << 20;
  // Budgets checked from the shapes before any compute (server/serving/budget.h).
  int64_t max_response_bytes = 1ll << 30;  // < protobuf's 2 GiB; clients must accept this much
  int64_t max_work_bytes = 4ll << 30;      // estimated working memory of one pass
  int stream_window = 4;
  // Dynamic batching (server-wide defaults; a model's config.json may override them).
  bool batching = true;  // false: DirectRunner, one forward pass per request
  int64_t max_batch_rows = 64;
  int64_t max_batch_tokens = 2048;  // bigger CPU passes fall off a cliff (README, batching)
  // 0, as Triton's default: a request is never held back while an instance is free; under load
  // batches form anyway from what queued during the previous pass. A delay > 0 trades latency at
  // low load for fuller batches (1000 us added ~1.5 ms to p50 at one call in flight).
  int64_t max_queue_delay_us = 0;
  // Forward-pass threads per model when batching; 1 for the same reason as --workers 1: OpenBLAS
  // threads every GEMM itself. Measured on 2 cores: 2 instances raised 64-client small-request
  // throughput ~12% (839 vs 750 req/s) but cut B=8,T=128 served throughput to 0.64x in-process
  // (0.89x with 1). Raise it per model (config.json "instances") where passes are small.
  int instances = 1;
  // gRPC transport security (server/app/tls.h): plaintext unless cert + key are set; a client CA makes
  // client certificates mandatory (mTLS). The metrics/health HTTP endpoint stays plaintext.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  std::string metrics_address = "0.0.0.0:8502";  // "" = no HTTP endpoint
  std::string metrics_port_file;
  std::string log_format = "text";
  std::string log_level = "info";
  double grace_period_s = 10.0;
  std::string port_file;
  // Model lifecycle: none (load at start only), poll (follow the repository folder), explicit
  // (LoadModel/UnloadModel RPCs; --load-model picks what loads at start, none named = all).
  std::string model_control_mode = "none";
  double repository_poll_secs = 15.0;
  std::vector<std::string> load_model;
  std::string admin_token_file;  // "" = model control RPCs need no token
  // Decoding sessions (docs/sessions.md): one KV cache pool per model version.
  int64_t kv_cache_bytes = 256ll << 20;
  int64_t kv_block_tokens = 16;
  int64_t session_idle_timeout_s = 600;         // 0 = never
  std::string kv_cache_full_policy = "refuse";  // or evict-lru
  int64_t debug_load_delay_ms = 0;              // test-only: widens the NOT_SERVING window
  int64_t debug_forward_delay_ms = 0;  // test-only: each forward pass first sleeps this long

  int ResolvedWorkers() const;
};

// Parses argv (and the environment / --config file). Returns the exit code when the program should
// stop right away (--help: 0, bad flags: non-zero, with the message printed), nullopt to run.
std::optional<int> ParseServerConfig(int argc, char** argv, ServerConfig* config);

}  // namespace mha::serve
