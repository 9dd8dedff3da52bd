// The echo servers of bench/echo_floor.cc (the echo floor and its anchors): six gRPC
// servers that answer every mha.v1 Forward with a ForwardResponse whose output is the query's
// bytes and compute nothing, with the same message limits (receive 64 MiB, send unlimited):
//   kMhaFloor  mha-server's stack: every method raw (ByteBuffer) on the completion-queue API with
//              mha-server's own CqUnaryMethod (threads = cores, at least 2), parsed by the handler
//              (Forward, GetModel): no method on the callback API and no synchronous one, so gRPC
//              starts no callback-queue or sync-server polling threads.
//   kMhaBefore mha-server's stack before that (to 2026-11-28): Forward as kMhaFloor's, GetModel on
//              the callback API, the default health service (a callback-API service).
//   kCallback  gRPC's own callback-API pattern (examples/cpp/helloworld/
//              greeter_callback_server.cc): the generated typed CallbackService, gRPC parses and
//              serializes.
//   kAsync     gRPC's own completion-queue pattern (greeter_async_server.cc): the generated
//              AsyncService, one completion queue drained by one thread, a CallData per call.
//   kAsyncHealth  kAsync with gRPC's default health service enabled (as mha-server and every
//              server behind a Kubernetes gRPC probe run): that service is on the callback API, so
//              gRPC starts its callback queue's polling threads, which now compete with the
//              completion-queue thread for the socket's events (what any callback method costs a
//              completion-queue method).
//   kHandoff   kMhaFloor answered as mha-server's scheduler answers: the handler queues the call,
//              one worker thread takes all that is queued and Finishes each (no compute): what
//              answering from a thread of one's own costs gRPC.
// Torch-free.
#pragma once

#include <string>

namespace mha::bench {

enum class EchoServerKind { kMhaFloor, kMhaBefore, kCallback, kAsync, kAsyncHealth, kHandoff };

// "mha", "mha-before", "callback", "async", "async+health", "handoff" (the names --server takes and
// the table prints).
const char* EchoServerName(EchoServerKind kind);
bool ParseEchoServerKind(const std::string& name, EchoServerKind* kind);

// Serves until SIGTERM/SIGINT; writes the bound port to `port_fd` (a pipe) and/or `port_file`
// when given. Returns the process's exit code.
int ServeEcho(EchoServerKind kind, const std::string& address, const std::string& port_file,
              int port_fd);

}  // namespace mha::bench
