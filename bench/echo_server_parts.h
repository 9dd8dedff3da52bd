// What the echo servers of echo_servers.cc and echo_servers_mha.cc share: the answers, the
// signal that stops a server, listening with mha-server's message limits, and serving one
// callback-API service. Internal to bench/'s echo floor.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "mha/v1/attention.grpc.pb.h"

namespace mha::bench::internal {

// The answer every server gives: the output a real pass would write (the query's bytes).
void FillEcho(const mha::v1::ForwardRequest& request, mha::v1::ForwardResponse* answer);
// GetModel answers like the built-in default model (E=512, H=8), so mha-client works against it.
void FillModel(mha::v1::ModelInfo* info);

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

// SIGTERM/SIGINT set the stop flag WaitForSignal polls.
void OnSignal(int);
void WaitForSignal();
std::chrono::system_clock::time_point Soon();  // a shutdown's deadline
// Listens on `address`, builds and starts `builder` and announces the port; null when it cannot.
std::unique_ptr<grpc::Server> Listen(grpc::ServerBuilder& builder, const std::string& address,
                                     const char* name, const std::string& port_file, int port_fd);
// One callback-API service with gRPC's default health service, until the signal.
int ServeCallback(grpc::Service* service, const std::string& address, const std::string& port_file,
                  int port_fd, const char* name);

// echo_servers_mha.cc: mha-server's stacks (kMhaFloor; kMhaBefore when `before`) and kHandoff.
int ServeMhaStack(bool before, const std::string& address, const std::string& port_file,
                  int port_fd);
int ServeHandoff(const std::string& address, const std::string& port_file, int port_fd);

}  // namespace mha::bench::internal
