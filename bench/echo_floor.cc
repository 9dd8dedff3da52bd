// The echo floor (issue 26): what the transport alone costs on this machine. A gRPC server with
// mha-server's stack (callback API, Forward registered raw and parsed as ForwardRequest, the
// default health service, the same message limits) that answers every Forward with a
// ForwardResponse whose output is the query's bytes (B=1, T=16, E=512 fp32: 32 KiB each way) and
// computes nothing, driven by mha-client bench's own load generator (client/bench_runner.h).
//
//   mha_echo_floor                     fork a server, run c=1 and c=32 against it, print p50 and
//   the
//                                      server's CPU per request (/proc/PID/stat), then stop it
//   mha_echo_floor --serve [--address 127.0.0.1:0] [--port-file F]
//                                      serve only (for mha-client bench --server-pid)
// Options: -n REQUESTS (per run, default 4000), -c C (one run at C instead of 1 and 32), --json.
// GetModel answers like the built-in default model (E=512, H=8), so mha-client works against it.
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "client/bench_runner.h"
#include "client/mha_client.h"
#include "mha/v1/attention.grpc.pb.h"

namespace {

using mha::v1::AttentionService;

constexpr int64_t kBatch = 1, kSeq = 16, kEmbed = 512, kHeads = 8;

class EchoService final
    : public AttentionService::WithRawCallbackMethod_Forward<AttentionService::CallbackService> {
 public:
  grpc::ServerUnaryReactor* Forward(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    mha::v1::ForwardRequest parsed;
    grpc::ByteBuffer copy = *request;  // shares the slices; Deserialize consumes its argument
    if (!grpc::SerializationTraits<mha::v1::ForwardRequest>::Deserialize(&copy, &parsed).ok()) {
      reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "not a ForwardRequest"));
      return reactor;
    }
    mha::v1::ForwardResponse answer;
    *answer.mutable_output() = parsed.query();  // the output a real pass would write: same bytes
    answer.set_model("echo");
    answer.set_model_version("1");
    bool own = false;
    if (!grpc::SerializationTraits<mha::v1::ForwardResponse>::Serialize(answer, response, &own)
             .ok()) {
      reactor->Finish(grpc::Status(grpc::StatusCode::INTERNAL, "cannot serialize"));
      return reactor;
    }
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* GetModel(grpc::CallbackServerContext* context,
                                     const mha::v1::GetModelRequest* /*request*/,
                                     mha::v1::ModelInfo* info) override {
    info->set_name("default");
    info->set_version("1");
    info->set_state(mha::v1::READY);
    info->set_embed_dim(kEmbed);
    info->set_num_heads(kHeads);
    info->set_head_dim(kEmbed / kHeads);
    info->set_kdim(kEmbed);
    info->set_vdim(kEmbed);
    info->set_dtype(mha::v1::FLOAT32);
    info->set_compute_dtype(mha::v1::FLOAT32);
    info->set_device("cpu");
    info->set_is_default(true);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

volatile sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

// Serves until SIGTERM/SIGINT; writes the port to `port_fd` (a pipe) or `port_file` when given.
int Serve(const std::string& address, const std::string& port_file, int port_fd) {
  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  EchoService service;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(64 << 20);  // as mha-server: --max-message-bytes + 1 MiB
  builder.SetMaxSendMessageSize(-1);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::fprintf(stderr, "echo floor: cannot listen on %s\n", address.c_str());
    return 1;
  }
  if (!port_file.empty()) std::ofstream(port_file) << port << "\n";
  if (port_fd >= 0) {
    const std::string text = std::to_string(port) + "\n";
    if (write(port_fd, text.data(), text.size()) < 0) return 1;
    close(port_fd);
  }
  std::fprintf(stderr, "echo floor server on port %d (pid %d)\n", port, getpid());
  while (!g_stop) usleep(100 * 1000);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return 0;
}

mha::v1::ForwardRequest MakeRequest() {
  mha::v1::ForwardRequest request;
  auto* query = request.mutable_query();
  query->set_dtype(mha::v1::FLOAT32);
  for (int64_t d : {kBatch, kSeq, kEmbed}) query->add_shape(d);
  std::vector<float> values(static_cast<size_t>(kBatch * kSeq * kEmbed));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 97) / 97.0f - 0.5f;
  query->set_data(values.data(), values.size() * sizeof(float));
  return request;
}

}  // namespace

int main(int argc, char** argv) {
  bool serve = false, json = false;
  std::string address = "127.0.0.1:0", port_file;
  int64_t requests = 4000;
  int concurrency = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--serve") {
      serve = true;
    } else if (a == "--address") {
      address = next();
    } else if (a == "--port-file") {
      port_file = next();
    } else if (a == "-n" || a == "--requests") {
      requests = std::atoll(next().c_str());
    } else if (a == "-c" || a == "--concurrency") {
      concurrency = std::atoi(next().c_str());
    } else if (a == "--json") {
      json = true;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--serve [--address HOST:PORT] [--port-file F]] [-n REQUESTS] "
                   "[-c C] [--json]\n",
                   argv[0]);
      return 2;
    }
  }
  if (serve) return Serve(address, port_file, -1);

  // Fork before anything touches gRPC: the child serves, the parent measures it from outside.
  int fds[2];
  if (pipe(fds) != 0) return 1;
  const pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    close(fds[0]);
    _exit(Serve(address, "", fds[1]));
  }
  close(fds[1]);
  char buf[32] = {};
  const ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
  close(fds[0]);
  const int port = n > 0 ? std::atoi(buf) : 0;
  int rc = 0;
  if (port <= 0) {
    std::fprintf(stderr, "echo floor: the server did not start\n");
    rc = 1;
  } else {
    mha::client::ClientOptions options;
    options.target = "127.0.0.1:" + std::to_string(port);
    mha::client::AttentionClient client(options);
    const mha::v1::ForwardRequest request = MakeRequest();
    std::vector<int> levels =
        concurrency > 0 ? std::vector<int>{concurrency} : std::vector<int>{1, 32};
    for (int c : levels) {
      mha::client::BenchOptions bench;
      bench.concurrency = c;
      bench.requests = requests;
      bench.warmup = 200;
      bench.server_cpu.pid = child;
      const mha::client::BenchReport r = mha::client::RunBench(client, request, bench);
      if (json) {
        std::printf("{\"concurrency\": %d, \"report\": %s}\n", c,
                    mha::client::BenchReportJson(r).c_str());
      } else {
        std::printf(
            "echo floor c=%d (B=1 T=16 E=512 fp32, 32 KiB each way): p50 %.1f us  p99 %.1f us  "
            "%.0f req/s  server cpu %.1f us per request\n",
            c, r.latency_p50_us, r.latency_p99_us, r.throughput, r.server_cpu.cpu_us_per_request);
      }
      if (r.errors > 0) {
        std::fprintf(stderr, "echo floor: %lld errors, first: %s\n",
                     static_cast<long long>(r.errors), r.first_error.c_str());
        rc = 1;
      }
    }
  }
  kill(child, SIGTERM);
  int status = 0;
  waitpid(child, &status, 0);
  return rc;
}
