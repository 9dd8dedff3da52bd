// mha-server flags. Every flag can also come from the environment as MHA_<FLAG_NAME>
// (--max-queue-size -> MHA_MAX_QUEUE_SIZE) and from a TOML/INI file given with --config
// (key = value, keys are the flag names without dashes, e.g. max-queue-size = 16).
// Precedence: command line > --config file > environment > default.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "server/serving/server_core.h"
#include "server/serving/serving_defaults.h"

namespace mha::serve {

struct ServerConfig {
  // The serving core's options. Their defaults live once, in the option structs themselves
  // (server/serving/server_core.h and the structs it holds); the flags bind to these fields, so the
  // shipped binary and every test that builds a ServerCore start from the same values.
  ServerCoreOptions core;

  // Front ends and the process (only the binary has these).
  std::string grpc_address = "0.0.0.0:8500";
  std::string device;  // "" = each model's config.json (else "auto")
  std::string dtype;   // "" = each model's config.json (else float32)
  // The KV cache dtype of the versions whose config.json has no "kv_cache_dtype"
  // (mha/kv_cache_dtype.h); parsed by CoreOptionsFrom, so that a bad name exits with code 2.
  std::string kv_cache_dtype = "model";
  int intra_op_threads = 1;
  int inter_op_threads = 1;
  std::string device_wait = "spin";  // mha/runtime.h DeviceWait: spin or block
  int64_t max_message_bytes = serve::kDefaultMaxMessageBytes;
  int stream_window = 4;
  // Triton's shared-memory extension (server/frontends/shm/shared_memory_registry.h).
  bool allow_client_shm = false;
  int64_t max_shm_bytes = int64_t{1} << 30;
  // gRPC server reflection (grpcurl without .proto files), server/frontends/reflection.
  bool grpc_reflection = true;
  // gRPC transport security (server/app/tls.h): plaintext unless cert + key are set; a client CA
  // makes client certificates mandatory (mTLS). The metrics/health HTTP endpoint stays plaintext.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  std::string metrics_address = "0.0.0.0:8502";  // "" = no HTTP endpoint
  std::string metrics_port_file;
  // KServe v2 HTTP/REST (server/frontends/rest): same TLS files as gRPC; "" = off.
  std::string http_address = "0.0.0.0:8501";
  std::string http_port_file;
  int http_threads = 192;
  int forward_threads = 0;  // the Forward/ModelInfer queue's threads; 0 = the cores (at least 2)
  std::string log_format = "text";
  std::string log_level = "info";
  double grace_period_s = 10.0;
  std::string port_file;
  std::string admin_token_file;     // "" = model control RPCs need no token
  int64_t debug_load_delay_ms = 0;  // test-only: widens the NOT_SERVING window
  // Test-only, set by mha-test-server (no flag): loading waits while it answers true.
  std::function<bool()> load_hold;

  int instances = 0;            // --instances (0 = auto: ResolvedInstances)
  int deprecated_workers = -1;  // --workers, its old name; -1 = not given
  int ResolvedInstances() const;
};

// The core's options as the binary runs them: --dtype/--device as overrides, --instances resolved,
// the batcher's queue size shared with the direct runner. INVALID_ARGUMENT for flags that
// contradict each other (--load-model without explicit mode).
StatusOr<ServerCoreOptions> CoreOptionsFrom(const ServerConfig& config);

// Parses argv (and the environment / --config file). Returns the exit code when the program should
// stop right away (--help: 0, bad flags: non-zero, with the message printed), nullopt to run.
std::optional<int> ParseServerConfig(int argc, char** argv, ServerConfig* config);

}  // namespace mha::serve
