#include "server_app.h"

#include <ATen/Parallel.h>
#include <fcntl.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <thread>

#include "attention_service.h"
#include "default_model.h"
#include "mha/runtime.h"
#include "serving_runtime.h"
#include "tensor_codec.h"

namespace mha::serve {
namespace {

constexpr char kServiceName[] = "mha.v1.AttentionService";

// Self-pipe: the handler only write()s the signal number (async-signal-safe); a watcher thread
// does the rest. A handler, not sigwait(), because libraries (OpenBLAS) start threads before
// main() whose signal masks we cannot control.
int g_signal_pipe[2] = {-1, -1};

extern "C" void OnShutdownSignal(int sig) {
  const int saved_errno = errno;
  const char byte = static_cast<char>(sig);
  [[maybe_unused]] const ssize_t n = write(g_signal_pipe[1], &byte, 1);
  errno = saved_errno;
}

// The first SIGINT/SIGTERM requests the graceful stop; a second one ends the process at once
// with exit code 1.
class SignalWatcher {
 public:
  void Start() {
    std::thread([this] {
      for (int count = 0;; ++count) {
        char byte = 0;
        const ssize_t n = read(g_signal_pipe[0], &byte, 1);
        if (n < 0 && errno == EINTR) {
          --count;
          continue;
        }
        if (n <= 0) return;
        if (count > 0) {
          std::fprintf(stderr, "mha-server: second signal %d, exiting now\n", byte);
          std::_Exit(1);
        }
        std::lock_guard<std::mutex> lock(mu_);
        signal_ = byte;
        cv_.notify_all();
      }
    }).detach();
  }
  // Waits up to `timeout` for a signal; returns it, or 0.
  int WaitFor(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [this] { return signal_ != 0; });
    return signal_;
  }
  int Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return signal_ != 0; });
    return signal_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int signal_ = 0;
};

bool WritePortFile(const std::string& path, int port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return false;
    out << port << "\n";
    if (!out.flush()) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

void LogModel(const ModelEntry& e, bool is_default) {
  if (e.state != ModelState::kReady) {
    spdlog::error("model {} v{} {}: {} (source {})", e.name, e.version, ModelStateName(e.state),
                  e.error, e.source);
    return;
  }
  const MhaOptions& o = e.model->options();
  spdlog::info(
      "model {}{} v{} READY: embed_dim={} num_heads={} head_dim={} kdim={} vdim={} bias={} "
      "add_bias_kv={} add_zero_attn={} dtype={} compute_dtype={} device={} format={} layout={} "
      "parameters={} source={}",
      e.name, is_default ? " (default)" : "", e.version, o.embed_dim, o.num_heads, o.head_dim(),
      o.key_dim(), o.value_dim(), o.bias, o.add_bias_kv, o.add_zero_attn, DTypeName(o.dtype),
      DTypeName(e.model->compute_dtype()), e.model->device(), e.format, e.layout,
      e.model->parameter_count(), e.source);
  if (!e.unused_keys.empty()) {
    spdlog::warn("model {}: {} unused keys in {} (first: {})", e.name, e.unused_keys.size(),
                 e.source, e.unused_keys.front());
  }
}

StatusOr<LoadOverrides> MakeOverrides(const ServerConfig& c) {
  LoadOverrides overrides;
  if (!c.dtype.empty()) {
    auto dtype = ParseDType(c.dtype);
    if (!dtype.ok()) return InvalidArgument("--dtype: " + dtype.status().message());
    overrides.dtype = *dtype;
  }
  if (!c.device.empty()) overrides.device = c.device;
  return overrides;
}

}  // namespace

void InstallShutdownSignalHandlers() {
  if (pipe2(g_signal_pipe, O_CLOEXEC) != 0) {
    std::perror("mha-server: pipe2");
    std::_Exit(1);
  }
  struct sigaction action {};
  action.sa_handler = OnShutdownSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

int RunServer(const ServerConfig& c) {
  auto overrides = MakeOverrides(c);
  if (!overrides.ok()) {
    spdlog::error("{}", overrides.status().message());
    return 2;
  }
  ConfigureThreads({c.intra_op_threads, c.inter_op_threads});
  const int workers = c.ResolvedWorkers();
  ServingRuntime runtime(c);  // runner (batching or direct), metrics, HTTP endpoint
  ModelRunner& runner = *runtime.runner();
  ServiceOptions service_options;
  service_options.limits = {c.max_batch_size, c.max_sequence_length, c.max_message_bytes};
  service_options.stream_window = c.stream_window;
  service_options.metrics = runtime.metrics();
  AttentionServiceImpl service(&runner, service_options);
  if (const Status http = runtime.StartHttp(); !http.ok()) {
    spdlog::error("{}", http.message());
    return 1;
  }
  if (!c.metrics_port_file.empty() && !WritePortFile(c.metrics_port_file, runtime.metrics_port())) {
    spdlog::error("cannot write --metrics-port-file {}", c.metrics_port_file);
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(c.grpc_address, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  // A little above --max-message-bytes, so that the handler can say precisely what is too big.
  const int64_t receive_limit = std::min<int64_t>(INT_MAX, c.max_message_bytes + (1 << 20));
  builder.SetMaxReceiveMessageSize(static_cast<int>(receive_limit));
  builder.SetMaxSendMessageSize(-1);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    spdlog::error("cannot listen on {}", c.grpc_address);
    runner.Shutdown();
    return 1;
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(false);
  health->SetServingStatus(kServiceName, false);
  SignalWatcher signals;
  signals.Start();
  spdlog::info(
      "mha-server listening on {} (port {}): NOT_SERVING until models are loaded; "
      "workers={} intra_op_threads={} inter_op_threads={} max_queue_size={} "
      "max_batch_size={} max_sequence_length={} max_message_bytes={}",
      c.grpc_address, port, workers, at::get_num_threads(), at::get_num_interop_threads(),
      c.max_queue_size, c.max_batch_size, c.max_sequence_length, c.max_message_bytes);
  spdlog::info("runtime: {}", RuntimeSummary());

  int sig = 0;
  if (c.debug_load_delay_ms > 0) {
    sig = signals.WaitFor(std::chrono::milliseconds(c.debug_load_delay_ms));
  }
  std::vector<ModelEntry> entries;
  std::string default_name;
  if (c.model_repository.empty()) {
    entries.push_back(MakeDefaultModel(*overrides));
    default_name = kDefaultModelName;
  } else {
    auto scanned = ScanRepository(c.model_repository);
    if (!scanned.ok()) {
      spdlog::error("{}", scanned.status().message());
      server->Shutdown();
      runner.Shutdown();
      return 1;
    }
    entries = std::move(scanned.value());
    auto picked = PickDefaultModel(entries, c.default_model);
    if (!picked.ok()) {
      spdlog::error("{}", picked.status().message());
      server->Shutdown();
      runner.Shutdown();
      return 1;
    }
    default_name = *picked;
    service.Publish(std::make_shared<const ModelRepository>(entries, default_name));
    for (auto& entry : entries) {
      if (sig == 0) sig = signals.WaitFor(std::chrono::milliseconds(0));
      if (sig == 0) LoadModelEntry(*overrides, &entry);
    }
  }
  auto repository = std::make_shared<const ModelRepository>(entries, default_name);
  service.Publish(repository);
  for (const auto& e : repository->entries()) LogModel(*e, e->name == default_name);
  runtime.OnModelsLoaded(*repository);
  if (default_name.empty()) {
    spdlog::warn("no default model ({} models, no --default-model): requests must name one",
                 entries.size());
  }

  if (sig == 0 && repository->ready_count() > 0) {
    health->SetServingStatus(true);
    health->SetServingStatus(kServiceName, true);
    runtime.SetReady(true);
    spdlog::info("SERVING {} of {} models on port {}", repository->ready_count(), entries.size(),
                 port);
    if (!c.port_file.empty() && !WritePortFile(c.port_file, port)) {
      spdlog::error("cannot write --port-file {}", c.port_file);
    }
  } else if (sig == 0) {
    spdlog::error("no model is READY: health stays NOT_SERVING (ListModels/GetModel show why)");
  }

  if (sig == 0) sig = signals.Wait();
  spdlog::info("signal {}: NOT_SERVING, finishing in-flight calls (grace period {} s)", sig,
               c.grace_period_s);
  health->SetServingStatus(false);
  health->SetServingStatus(kServiceName, false);
  runtime.SetReady(false);
  const auto grace = std::chrono::milliseconds(static_cast<int64_t>(c.grace_period_s * 1000));
  server->Shutdown(std::chrono::system_clock::now() + grace);
  runner.Shutdown();
  server->Wait();
  runtime.StopHttp();
  spdlog::info("mha-server stopped");
  return 0;
}

}  // namespace mha::serve
