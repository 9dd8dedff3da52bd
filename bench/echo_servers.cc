#include "bench/echo_servers.h"

#include <absl/synchronization/mutex.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "mha/v1/attention.grpc.pb.h"
#include "server/frontends/common/cq_unary.h"

namespace mha::bench {
namespace {

using mha::v1::AttentionService;

constexpr int64_t kEmbed = 512, kHeads = 8;

// The answer every server gives: the output a real pass would write (the query's bytes).
void FillEcho(const mha::v1::ForwardRequest& request, mha::v1::ForwardResponse* answer) {
  *answer->mutable_output() = request.query();
  answer->set_model("echo");
  answer->set_model_version("1");
}

// GetModel answers like the built-in default model (E=512, H=8), so mha-client works against it.
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

// GetModel on the callback API (FillModel), for the callback-API servers below.
template <class Base>
class WithEchoGetModel : public Base {
 public:
  grpc::ServerUnaryReactor* GetModel(grpc::CallbackServerContext* context,
                                     const mha::v1::GetModelRequest* /*request*/,
                                     mha::v1::ModelInfo* info) override {
    FillModel(info);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

// mha-server's stack: every method raw on the completion-queue API with the same CqUnaryMethod
// (its threads and queue, server/frontends/common/cq_unary.h), parsed and serialized by the
// handler: Forward and GetModel here (mha-server's other methods are requested on the same queue
// and idle; its health and reflection services too).
class MhaFloorService final
    : public AttentionService::WithRawMethod_GetModel<
          AttentionService::WithRawMethod_Forward<AttentionService::Service>> {
 public:
  static void HandleGetModel(mha::serve::CqCall* call) {
    mha::v1::ModelInfo info;
    FillModel(&info);
    bool own = false;
    (void)grpc::SerializationTraits<mha::v1::ModelInfo>::Serialize(info, call->response(), &own);
    call->Finish(grpc::Status::OK);
  }
  static void Handle(mha::serve::CqCall* call) {
    mha::v1::ForwardRequest parsed;
    grpc::ByteBuffer copy = call->request();  // shares the slices; Deserialize consumes it
    if (!grpc::SerializationTraits<mha::v1::ForwardRequest>::Deserialize(&copy, &parsed).ok()) {
      return call->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "not a ForwardRequest"));
    }
    mha::v1::ForwardResponse answer;
    FillEcho(parsed, &answer);
    bool own = false;
    if (!grpc::SerializationTraits<mha::v1::ForwardResponse>::Serialize(answer, call->response(),
                                                                        &own)
             .ok()) {
      return call->Finish(grpc::Status(grpc::StatusCode::INTERNAL, "cannot serialize"));
    }
    call->Finish(grpc::Status::OK);
  }
};

// mha-server's stack answered the way its scheduler answers: the handler parses the request and
// queues the call; one worker thread takes everything queued at once (a "pass") and serializes
// and Finishes each call from there. No compute: what answering off gRPC's threads costs.
class HandoffService final
    : public WithEchoGetModel<
          AttentionService::WithRawCallbackMethod_Forward<AttentionService::CallbackService>> {
 public:
  HandoffService() : worker_([this] { Work(); }) {}
  ~HandoffService() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  grpc::ServerUnaryReactor* Forward(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    Call call{reactor, response, std::make_unique<mha::v1::ForwardRequest>()};
    grpc::ByteBuffer copy = *request;  // shares the slices; Deserialize consumes its argument
    if (!grpc::SerializationTraits<mha::v1::ForwardRequest>::Deserialize(&copy, call.request.get())
             .ok()) {
      reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "not a ForwardRequest"));
      return reactor;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(call));
    }
    cv_.notify_one();
    return reactor;
  }

 private:
  struct Call {
    grpc::ServerUnaryReactor* reactor;
    grpc::ByteBuffer* response;
    std::unique_ptr<mha::v1::ForwardRequest> request;
  };

  void Work() {
    for (;;) {
      std::vector<Call> pass;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        pass.swap(queue_);
      }
      for (Call& call : pass) {
        mha::v1::ForwardResponse answer;
        FillEcho(*call.request, &answer);
        bool own = false;
        const grpc::Status s = grpc::SerializationTraits<mha::v1::ForwardResponse>::Serialize(
            answer, call.response, &own);
        call.reactor->Finish(s.ok() ? grpc::Status::OK
                                    : grpc::Status(grpc::StatusCode::INTERNAL, "cannot serialize"));
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Call> queue_;
  bool stop_ = false;
  std::thread worker_;
};

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

volatile sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

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

// mha-server's stack before every method moved to the completion-queue API (kMhaBefore): Forward
// raw on the queue, GetModel on the callback API, gRPC's default health service.
class MhaBeforeService final
    : public WithEchoGetModel<AttentionService::WithCallbackMethod_GetModel<
          AttentionService::WithRawMethod_Forward<AttentionService::Service>>> {};

// As mha-server serves (server/app/server_app.cc): the methods on a CqQueue added to the builder,
// started after it, shut down after the server. `Service` is MhaFloorService or MhaBeforeService.
template <class Service>
int ServeMha(const std::string& address, const std::string& port_file, int port_fd,
             const char* name) {
  // As mha-server (server/app/server_main.cc): no deadlock check on gRPC's absl locks.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  constexpr bool kBefore = std::is_same_v<Service, MhaBeforeService>;
  grpc::EnableDefaultHealthCheckService(kBefore);
  Service service;
  mha::serve::CqQueue queue({std::max(2, static_cast<int>(std::thread::hardware_concurrency()))});
  const std::unique_ptr<mha::serve::CqUnaryMethod> forward = mha::serve::ServeRawUnary(
      &queue, &service, &Service::RequestForward, &MhaFloorService::Handle);
  std::unique_ptr<mha::serve::CqUnaryMethod> get_model;
  if constexpr (!kBefore) {
    get_model = mha::serve::ServeRawUnary(&queue, &service, &Service::RequestGetModel,
                                          &MhaFloorService::HandleGetModel);
  }
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  queue.AddTo(&builder);
  std::unique_ptr<grpc::Server> server = Listen(builder, address, name, port_file, port_fd);
  if (!server) return 1;
  queue.Start();
  WaitForSignal();
  server->Shutdown(Soon());
  queue.Shutdown();
  return 0;
}

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
  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  switch (kind) {
    case EchoServerKind::kMhaFloor:
      return ServeMha<MhaFloorService>(address, port_file, port_fd, "mha");
    case EchoServerKind::kMhaBefore:
      return ServeMha<MhaBeforeService>(address, port_file, port_fd, "mha-before");
    case EchoServerKind::kCallback: {
      BareCallbackService service;
      return ServeCallback(&service, address, port_file, port_fd, "callback");
    }
    case EchoServerKind::kAsync:
      return ServeAsync(address, port_file, port_fd, /*health=*/false);
    case EchoServerKind::kAsyncHealth:
      return ServeAsync(address, port_file, port_fd, /*health=*/true);
    case EchoServerKind::kHandoff: {
      absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);  // as kMhaFloor
      HandoffService service;
      return ServeCallback(&service, address, port_file, port_fd, "handoff");
    }
  }
  return 2;
}

}  // namespace mha::bench
