// A real gRPC server on 127.0.0.1:0 whose methods are served on a CqQueue, for the front ends'
// unit tests: the services registered and the queue added before the server starts, the queue
// started after it; Stop() shuts the server down (open calls cancelled once `grace` runs out),
// then the queue, in the app's order (server/app/server_app.cc). The queue, the services and the
// methods on them outlive it.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <initializer_list>
#include <memory>
#include <string>

#include "server/frontends/cq/cq_queue.h"

namespace mha::testing {

class CqTestServer {
 public:
  CqTestServer(serve::CqQueue* queue, std::initializer_list<grpc::Service*> services)
      : queue_(queue) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    for (grpc::Service* service : services) builder.RegisterService(service);
    queue_->AddTo(&builder);
    server_ = builder.BuildAndStart();
    if (server_) queue_->Start();
  }
  ~CqTestServer() { Stop(); }
  CqTestServer(const CqTestServer&) = delete;
  CqTestServer& operator=(const CqTestServer&) = delete;

  bool listening() const { return server_ != nullptr && port_ != 0; }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  std::shared_ptr<grpc::Channel> Channel() const {
    return grpc::CreateChannel(target(), grpc::InsecureChannelCredentials());
  }
  grpc::Server* server() const { return server_.get(); }
  // Idempotent.
  void Stop(std::chrono::milliseconds grace = std::chrono::seconds(5)) {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + grace);
    queue_->Shutdown();
  }

 private:
  serve::CqQueue* const queue_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace mha::testing
