// mha-server's own stacks among the echo servers (echo_servers.h): kMhaFloor (every method raw on
// one CqQueue, as mha-server serves now), kMhaBefore (its stack before that) and kHandoff (the
// callback stack answered from a worker thread, as the scheduler answers).
#include <absl/synchronization/mutex.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "bench/echo_server_parts.h"
#include "mha/v1/attention.grpc.pb.h"
#include "server/frontends/cq/cq_unary.h"

namespace mha::bench::internal {
namespace {

using mha::v1::AttentionService;

// mha-server's stack: every method raw on the completion-queue API with the same CqUnaryMethod
// (its threads and queue, server/frontends/cq/cq_unary.h), parsed and serialized by the
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

}  // namespace

int ServeMhaStack(bool before, const std::string& address, const std::string& port_file,
                  int port_fd) {
  return before ? ServeMha<MhaBeforeService>(address, port_file, port_fd, "mha-before")
                : ServeMha<MhaFloorService>(address, port_file, port_fd, "mha");
}

int ServeHandoff(const std::string& address, const std::string& port_file, int port_fd) {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);  // as kMhaFloor
  HandoffService service;
  return ServeCallback(&service, address, port_file, port_fd, "handoff");
}

}  // namespace mha::bench::internal
