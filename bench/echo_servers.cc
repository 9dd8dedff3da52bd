#include "bench/echo_servers.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

#include "bench/echo_server_parts.h"
#include "mha/v1/attention.grpc.pb.h"

namespace mha::bench {
namespace internal {
namespace {

constexpr int64_t kEmbed = 512, kHeads = 8;
volatile sig_atomic_t g_stop = 0;

grpc::ServerBuilder& Limits(grpc::ServerBuilder& builder) {
  builder.SetMaxReceiveMessageSize(64 << 20);  // as mha-server: --max-message-bytes + 1 MiB
  builder.SetMaxSendMessageSize(-1);
  return builder;
}

bool Announce(const char* name, int port, const std::string& port_file, int port_fd) {
  if (!port_file.empty()) std::ofstream(port_file) << port << "\n";
  if (port_fd >= 0) {
    const std::string text = std::to_string(port) + "\n";
    if (write(port_fd, text.data(), text.size()) < 0) return false;
    close(port_fd);
  }
  std::fprintf(stderr, "echo server '%s' on port %d (pid %d)\n", name, port, getpid());
  return true;
}

}  // namespace

void FillEcho(const mha::v1::ForwardRequest& request, mha::v1::ForwardResponse* answer) {
  *answer->mutable_output() = request.query();
  answer->set_model("echo");
  answer->set_model_version("1");
}

void FillModel(mha::v1::ModelInfo* info) {
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
}

void OnSignal(int) { g_stop = 1; }

void WaitForSignal() {
  while (!g_stop) usleep(100 * 1000);
}

std::chrono::system_clock::time_point Soon() {
  return std::chrono::system_clock::now() + std::chrono::seconds(1);
}

// Listens on `address`, builds and starts `builder` and announces the port; null when it cannot.
std::unique_ptr<grpc::Server> Listen(grpc::ServerBuilder& builder, const std::string& address,
                                     const char* name, const std::string& port_file, int port_fd) {
  int port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
  std::unique_ptr<grpc::Server> server = Limits(builder).BuildAndStart();
  if (server && port != 0 && Announce(name, port, port_file, port_fd)) return server;
  std::fprintf(stderr, "echo server '%s': cannot listen on %s\n", name, address.c_str());
  return nullptr;
}

int ServeCallback(grpc::Service* service, const std::string& address, const std::string& port_file,
                  int port_fd, const char* name) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = Listen(builder, address, name, port_file, port_fd);
  if (!server) return 1;
  WaitForSignal();
  server->Shutdown(Soon());
  return 0;
}

}  // namespace internal

namespace {

using internal::FillEcho;
using internal::FillModel;
using internal::Listen;
using internal::Soon;
using internal::WaitForSignal;
using internal::WithEchoGetModel;
using mha::v1::AttentionService;

// gRPC's callback example: the typed service, gRPC parses the request and serializes the answer.
class BareCallbackService final : public WithEchoGetModel<AttentionService::CallbackService> {
 public:
  grpc::ServerUnaryReactor* Forward(grpc::CallbackServerContext* context,
                                    const mha::v1::ForwardRequest* request,
                                    mha::v1::ForwardResponse* answer) override {
    FillEcho(*request, answer);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

// gRPC's async example: one call's state machine (PROCESS -> FINISH) per unary method.
class AsyncCall {
 public:
  virtual ~AsyncCall() = default;
  // `ok` false: the server is shutting down (the request never came, or Finish did not happen).
  virtual void Proceed(bool ok) = 0;
};

template <typename Method>
class AsyncUnary final : public AsyncCall {
 public:
  AsyncUnary(AttentionService::AsyncService* service, grpc::ServerCompletionQueue* cq)
      : service_(service), cq_(cq), responder_(&context_) {
    Method::Request(service_, &context_, &request_, &responder_, cq_, this);
  }

  void Proceed(bool ok) override {
    if (!ok || finished_) {
      delete this;
      return;
    }
    new AsyncUnary(service_, cq_);  // the next call, before answering this one
    Method::Answer(request_, &answer_);
    responder_.Finish(answer_, grpc::Status::OK, this);
    finished_ = true;
  }

 private:
  AttentionService::AsyncService* service_;
  grpc::ServerCompletionQueue* cq_;
  grpc::ServerContext context_;
  typename Method::Request_ request_;
  typename Method::Response_ answer_;
  grpc::ServerAsyncResponseWriter<typename Method::Response_> responder_;
  bool finished_ = false;
};

struct AsyncForward {
  using Request_ = mha::v1::ForwardRequest;
  using Response_ = mha::v1::ForwardResponse;
  static void Request(AttentionService::AsyncService* service, grpc::ServerContext* context,
                      Request_* request, grpc::ServerAsyncResponseWriter<Response_>* responder,
                      grpc::ServerCompletionQueue* cq, void* tag) {
    service->RequestForward(context, request, responder, cq, cq, tag);
  }
  static void Answer(const Request_& request, Response_* answer) { FillEcho(request, answer); }
};

// GetModel too, so that mha-client (bench, health aside) works against it.
struct AsyncGetModel {
  using Request_ = mha::v1::GetModelRequest;
  using Response_ = mha::v1::ModelInfo;
  static void Request(AttentionService::AsyncService* service, grpc::ServerContext* context,
                      Request_* request, grpc::ServerAsyncResponseWriter<Response_>* responder,
                      grpc::ServerCompletionQueue* cq, void* tag) {
    service->RequestGetModel(context, request, responder, cq, cq, tag);
  }
  static void Answer(const Request_& /*request*/, Response_* answer) { FillModel(answer); }
};

int ServeAsync(const std::string& address, const std::string& port_file, int port_fd, bool health) {
  if (health) grpc::EnableDefaultHealthCheckService(true);
  AttentionService::AsyncService service;
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::unique_ptr<grpc::ServerCompletionQueue> cq = builder.AddCompletionQueue();
  std::unique_ptr<grpc::Server> server =
      Listen(builder, address, health ? "async+health" : "async", port_file, port_fd);
  if (!server) return 1;
  std::thread handler([&] {  // the example's HandleRpcs, ending when the queue is shut down
    new AsyncUnary<AsyncForward>(&service, cq.get());
    new AsyncUnary<AsyncGetModel>(&service, cq.get());
    void* tag = nullptr;
    bool ok = false;
    while (cq->Next(&tag, &ok)) static_cast<AsyncCall*>(tag)->Proceed(ok);
  });
  WaitForSignal();
  server->Shutdown(Soon());
  cq->Shutdown();
  handler.join();
  return 0;
}

}  // namespace

const char* EchoServerName(EchoServerKind kind) {
  switch (kind) {
    case EchoServerKind::kMhaFloor:
      return "mha";
    case EchoServerKind::kMhaBefore:
      return "mha-before";
    case EchoServerKind::kCallback:
      return "callback";
    case EchoServerKind::kAsync:
      return "async";
    case EchoServerKind::kAsyncHealth:
      return "async+health";
    case EchoServerKind::kHandoff:
      return "handoff";
  }
  return "?";
}

bool ParseEchoServerKind(const std::string& name, EchoServerKind* kind) {
  for (EchoServerKind k :
       {EchoServerKind::kMhaFloor, EchoServerKind::kMhaBefore, EchoServerKind::kCallback,
        EchoServerKind::kAsync, EchoServerKind::kAsyncHealth, EchoServerKind::kHandoff}) {
    if (name == EchoServerName(k)) {
      *kind = k;
      return true;
    }
  }
  return false;
}

int ServeEcho(EchoServerKind kind, const std::string& address, const std::string& port_file,
              int port_fd) {
  signal(SIGTERM, internal::OnSignal);
  signal(SIGINT, internal::OnSignal);
  switch (kind) {
    case EchoServerKind::kMhaFloor:
      return internal::ServeMhaStack(/*before=*/false, address, port_file, port_fd);
    case EchoServerKind::kMhaBefore:
      return internal::ServeMhaStack(/*before=*/true, address, port_file, port_fd);
    case EchoServerKind::kCallback: {
      BareCallbackService service;
      return internal::ServeCallback(&service, address, port_file, port_fd, "callback");
    }
    case EchoServerKind::kAsync:
      return ServeAsync(address, port_file, port_fd, /*health=*/false);
    case EchoServerKind::kAsyncHealth:
      return ServeAsync(address, port_file, port_fd, /*health=*/true);
    case EchoServerKind::kHandoff:
      return internal::ServeHandoff(address, port_file, port_fd);
  }
  return 2;
}

}  // namespace mha::bench
