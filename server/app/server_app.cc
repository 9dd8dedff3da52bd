#include "server/app/server_app.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

#include "mha/runtime.h"
#include "server/app/tls.h"
#include "server/frontends/common/admin_auth.h"
#include "server/frontends/cq/cq_queue.h"
#include "server/frontends/grpc_v1/attention_service.h"
#include "server/frontends/grpc_v1/model_control_service.h"
#include "server/frontends/health/health_service.h"
#include "server/frontends/http/metrics_http.h"
#include "server/frontends/oip/inference_service.h"
#include "server/frontends/reflection/reflection_service.h"
#include "server/frontends/rest/rest_server.h"
#include "server/frontends/shm/shared_memory_registry.h"
#include "server/serving/server_core.h"

namespace mha::serve {
namespace {

// The services health answers for besides "" (tests/deploy's checks read these names here).
constexpr char kServiceName[] = "mha.v1.AttentionService";
constexpr char kOipServiceName[] = "inference.GRPCInferenceService";

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

// Everything one server run holds, in the order it is built (and the reverse of its stop).
class ServerApp {
 public:
  ServerApp(const ServerConfig& config, std::shared_ptr<grpc::ServerCredentials> credentials,
            std::string admin_token)
      : c_(config), credentials_(std::move(credentials)), admin_token_(std::move(admin_token)) {}

  Status Start(const ServerCoreOptions& options);
  // Loads the models (background threads) while watching for a signal; SERVING when one model is
  // READY. Returns the signal that arrived meanwhile, or 0.
  int LoadModels(SignalWatcher& signals);
  void Stop(int sig);

 private:
  Status StartHttp();
  Status StartGrpc();
  Status StartRest();
  void FillKServeOptions(KServeOptions* o) const;
  void SetServing(bool serving);
  std::unique_ptr<oip::GrpcInferenceServiceImpl> MakeOipService();
  // --forward-threads: the threads of the queue every gRPC method is served on (one CqQueue)
  int ForwardThreads() const {
    return c_.forward_threads > 0
               ? c_.forward_threads
               : std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  }

  const ServerConfig& c_;
  std::shared_ptr<grpc::ServerCredentials> credentials_;  // tls.h: plaintext, TLS or mTLS
  const std::string admin_token_;                         // "" = model control needs none
  std::unique_ptr<ServerCore> core_;
  std::unique_ptr<SharedMemoryRegistry> shm_;  // client shared memory, both KServe front ends
  std::unique_ptr<MetricsHttpServer> http_;
  std::unique_ptr<AttentionServiceImpl> service_;
  std::unique_ptr<ModelControlServiceImpl> control_;
  std::unique_ptr<oip::GrpcInferenceServiceImpl> oip_service_;  // Open Inference Protocol v2
  std::unique_ptr<HealthService> health_;                       // grpc.health.v1
  std::unique_ptr<ReflectionService> reflection_;               // null with --grpc-reflection=false
  std::unique_ptr<rest::RestServer> rest_;                      // the same over HTTP/REST
  // Every gRPC method's queue: destroyed after the server, before the services.
  std::unique_ptr<CqQueue> queue_;
  std::unique_ptr<grpc::Server> server_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> loaded_{false};
  int port_ = 0;
};

Status ServerApp::Start(const ServerCoreOptions& options) {
  auto core = ServerCore::Create(options);
  if (!core.ok()) return core.status();
  core_ = std::move(core.value());
  shm_ = std::make_unique<SharedMemoryRegistry>(
      ShmRegistryOptions{c_.allow_client_shm, c_.max_shm_bytes});
  if (c_.allow_client_shm) {
    spdlog::info("client shared memory on: at most {} bytes mapped (--max-shm-bytes)",
                 c_.max_shm_bytes);
  }
  if (options.batching) {
    const BatcherOptions& b = options.batcher;
    spdlog::info(
        "dynamic batching on: max_batch_rows={} max_batch_tokens={} "
        "max_queue_delay_us={} instances={} (config.json keys override per model)",
        b.max_batch_rows, b.max_batch_tokens, b.max_queue_delay_us, b.instances);
  } else {
    spdlog::info("dynamic batching off: one forward pass per request");
  }
  MHA_RETURN_IF_ERROR(StartHttp());
  MHA_RETURN_IF_ERROR(StartGrpc());
  return StartRest();
}

// What both KServe v2 front ends (OIP gRPC, REST) take from the app: the same limits, health,
// repository control and admin token (frontends/common/kserve_options.h).
void ServerApp::FillKServeOptions(KServeOptions* o) const {
  o->max_message_bytes = c_.max_message_bytes;
  o->server_ready = [this] { return ready_.load(); };
  o->controller = core_.get();
  o->admin_token = admin_token_;
  o->shm = shm_.get();
}

// KServe v2 HTTP/REST: the same core, limits, health, metrics and TLS files as gRPC.
Status ServerApp::StartRest() {
  if (c_.http_address.empty()) {
    spdlog::info("HTTP/REST off (--http-address is empty)");
    return Status::Ok();
  }
  rest::RestFrontendOptions options;
  FillKServeOptions(&options);
  options.threads = c_.http_threads;
  options.tls_cert_file = c_.tls_cert_file;
  options.tls_key_file = c_.tls_key_file;
  options.tls_client_ca_file = c_.tls_client_ca_file;
  rest_ = std::make_unique<rest::RestServer>(core_.get(), std::move(options));
  MHA_RETURN_IF_ERROR(rest_->Start(c_.http_address));
  spdlog::info("HTTP/REST (KServe v2) on {}://{} (port {})", rest_->tls() ? "https" : "http",
               c_.http_address, rest_->port());
  if (!c_.http_port_file.empty() && !WritePortFile(c_.http_port_file, rest_->port())) {
    spdlog::error("cannot write --http-port-file {}", c_.http_port_file);
  }
  return Status::Ok();
}

Status ServerApp::StartHttp() {
  if (c_.metrics_address.empty()) {
    spdlog::info("metrics endpoint off (--metrics-address is empty)");
    return Status::Ok();
  }
  http_ = std::make_unique<MetricsHttpServer>(core_->metrics(), [this] { return ready_.load(); });
  MHA_RETURN_IF_ERROR(http_->Start(c_.metrics_address));
  spdlog::info("metrics on http://{} (port {}): /metrics /healthz /readyz", c_.metrics_address,
               http_->port());
  if (!c_.metrics_port_file.empty() && !WritePortFile(c_.metrics_port_file, http_->port())) {
    spdlog::error("cannot write --metrics-port-file {}", c_.metrics_port_file);
  }
  return Status::Ok();
}

Status ServerApp::StartGrpc() {
  queue_ = std::make_unique<CqQueue>(CqQueue::Options{ForwardThreads()});
  GrpcFrontendOptions v1_options{c_.max_message_bytes, c_.stream_window, shm_.get()};
  service_ = std::make_unique<AttentionServiceImpl>(core_.get(), queue_.get(), v1_options);
  control_ = std::make_unique<ModelControlServiceImpl>(core_.get(), queue_.get(), admin_token_);
  health_ = std::make_unique<HealthService>(queue_.get());
  health_->SetServingStatus(kServiceName, false);
  health_->SetServingStatus(kOipServiceName, false);
  // gRPC's own health service is on the callback API (threads polling beside the queue's): ours.
  grpc::EnableDefaultHealthCheckService(false);
  if (c_.grpc_reflection) {
    reflection_ = std::make_unique<ReflectionService>(
        queue_.get(), std::vector<std::string>{v1::AttentionService::service_full_name(),
                                               v1::ModelControlService::service_full_name(),
                                               inference::GRPCInferenceService::service_full_name(),
                                               grpc::health::v1::Health::service_full_name()});
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(c_.grpc_address, credentials_, &port_);
  queue_->AddTo(&builder);  // every method's completion queue
  service_->AddTo(&builder);
  builder.RegisterService(control_.get());
  builder.RegisterService(health_.get());
  if (reflection_) builder.RegisterService(reflection_.get());
  oip_service_ = MakeOipService();
  oip_service_->AddTo(&builder);
  // A little above --max-message-bytes, so that the handler can say precisely what is too big.
  const int64_t receive_limit = std::min<int64_t>(INT_MAX, c_.max_message_bytes + (1 << 20));
  builder.SetMaxReceiveMessageSize(static_cast<int>(receive_limit));
  builder.SetMaxSendMessageSize(-1);
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) return Unavailable("cannot listen on " + c_.grpc_address);
  queue_->Start();  // the methods' first calls requested, its threads started
  SetServing(false);
  spdlog::info(
      "mha-server listening on {} (port {}, {}): NOT_SERVING until models are loaded; "
      "instances={} intra_op_threads={} inter_op_threads={} device_wait={} max_queue_size={} "
      "max_batch_size={} max_sequence_length={} max_message_bytes={}",
      c_.grpc_address, port_, TransportSecurityName(c_), c_.ResolvedInstances(), IntraOpThreads(),
      InterOpThreads(), DeviceWaitName(GetDeviceWait()), c_.core.batcher.max_queue_size,
      c_.core.limits.max_batch_size, c_.core.limits.max_sequence_length, c_.max_message_bytes);
  spdlog::info("runtime: {}", RuntimeSummary());
  return Status::Ok();
}

// Same core, limits, health and metrics as mha.v1.
std::unique_ptr<oip::GrpcInferenceServiceImpl> ServerApp::MakeOipService() {
  oip::OipFrontendOptions options;
  FillKServeOptions(&options);
  options.stream_window = c_.stream_window;
  return std::make_unique<oip::GrpcInferenceServiceImpl>(core_.get(), queue_.get(),
                                                         std::move(options));
}

void ServerApp::SetServing(bool serving) {
  health_->SetServingStatus(serving);  // "", mha.v1 and OIP
  ready_ = serving;
}

int ServerApp::LoadModels(SignalWatcher& signals) {
  int sig = 0;
  if (c_.debug_load_delay_ms > 0) {
    sig = signals.WaitFor(std::chrono::milliseconds(c_.debug_load_delay_ms));
  }
  while (sig == 0 && c_.load_hold && c_.load_hold()) {
    sig = signals.WaitFor(std::chrono::milliseconds(2));
  }
  if (sig != 0) return sig;
  core_->StartLoading([this, &signals] {  // `signals` outlives Stop(), which joins the loader
    loaded_ = true;
    signals.Notify();
  });
  while (!loaded_ && sig == 0) sig = signals.WaitFor(std::chrono::milliseconds(200));
  if (sig != 0) return sig;
  auto repository = core_->repository();
  if (repository->default_name().empty()) {
    spdlog::warn("no default model ({} models, no --default-model): requests must name one",
                 repository->entries().size());
  }
  if (repository->ready_count() == 0) {
    spdlog::error("no model is READY: health stays NOT_SERVING (ListModels/GetModel show why)");
    return 0;
  }
  SetServing(true);
  spdlog::info("SERVING {} of {} models on port {}", repository->ready_count(),
               repository->entries().size(), port_);
  if (!c_.port_file.empty() && !WritePortFile(c_.port_file, port_)) {
    spdlog::error("cannot write --port-file {}", c_.port_file);
  }
  return 0;
}

void ServerApp::Stop(int sig) {
  spdlog::info("signal {}: NOT_SERVING, finishing in-flight calls (grace period {} s)", sig,
               c_.grace_period_s);
  if (server_) SetServing(false);
  // REST first: it stops accepting and answers what it has (the core still runs).
  if (rest_) rest_->Stop();
  if (health_) health_->Shutdown();  // open watches end now, not at the grace deadline
  const auto grace = std::chrono::milliseconds(static_cast<int64_t>(c_.grace_period_s * 1000));
  // With a shared KV store, every session is written and released while the calls in flight
  // finish (within the grace period): another replica restores them with nothing replayed.
  std::thread handover;
  if (core_ && core_->kv_store_on()) {
    const auto deadline = std::chrono::steady_clock::now() + grace * 9 / 10;
    handover = std::thread([this, deadline] {
      const int64_t n = core_->HandOverSessions(deadline);
      spdlog::info("{} sessions handed over to the shared KV store", n);
    });
  }
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + grace);
  if (handover.joinable()) handover.join();
  if (core_) core_->Stop();  // completes accepted requests, joins the schedulers
  if (server_) server_->Wait();
  // The queue's threads drain it and end.
  if (queue_) queue_->Shutdown();
  if (shm_) shm_->Clear();  // every client region unmapped (no request holds one now)
  if (http_) http_->Stop();
  spdlog::info("mha-server stopped");
}

// After a stop signal the process ends within the grace period plus one second, whatever is still
// running: calls were told to finish or were cancelled at the grace deadline, so a forward pass
// still computing then has nobody to answer. Exit code 0: the stop was asked for. It stays armed
// through main's return and static destruction (those may hang too), so when it fires it touches
// nothing that exit() may have destroyed: no spdlog (it once crashed there, exit 139), one
// preformatted line written to stderr, then _Exit.
void StartStopWatchdog(double grace_period_s) {
  const auto limit = std::chrono::milliseconds(static_cast<int64_t>(grace_period_s * 1000) + 1000);
  static char message[160];  // formatted now, while everything is alive
  const int n = std::snprintf(message, sizeof(message),
                              "mha-server: still stopping %lld ms after the signal (a forward "
                              "pass is running): exiting now\n",
                              static_cast<long long>(limit.count()));
  const size_t length = n > 0 ? std::min(static_cast<size_t>(n), sizeof(message) - 1) : 0;
  std::thread([limit, length] {
    std::this_thread::sleep_for(limit);
    [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, message, length);
    std::_Exit(0);
  }).detach();
}

}  // namespace

int RunServer(const ServerConfig& c) {
  auto options = CoreOptionsFrom(c);
  if (!options.ok()) {
    spdlog::error("{}", options.status().message());
    return 2;
  }
  // TLS files are checked before anything starts: a bad secret is a configuration error.
  auto credentials = MakeServerCredentials(c);
  if (!credentials.ok()) {
    spdlog::error("{}", credentials.status().message());
    return 2;
  }
  std::string admin_token;
  if (!c.admin_token_file.empty()) {
    auto token = ReadAdminToken(c.admin_token_file);
    if (!token.ok()) {
      spdlog::error("{}", token.status().message());
      return 2;
    }
    admin_token = *token;
  }
  const StatusOr<DeviceWait> wait = ParseDeviceWait(c.device_wait);
  if (!wait.ok()) {
    spdlog::error("--device-wait: {}", wait.status().message());
    return 2;
  }
  if (const Status threads =
          ConfigureThreads({c.intra_op_threads, c.inter_op_threads, wait.value()});
      !threads.ok()) {
    spdlog::error("{}", threads.message());
    return 1;
  }
  ServerApp app(c, *credentials, admin_token);
  if (const Status started = app.Start(*options); !started.ok()) {
    spdlog::error("{}", started.message());
    app.Stop(0);
    return 1;
  }
  SignalWatcher signals;
  signals.Start();
  int sig = app.LoadModels(signals);
  if (sig == 0) sig = signals.Wait();
  StartStopWatchdog(c.grace_period_s);
  app.Stop(sig);
  return 0;
}

}  // namespace mha::serve
