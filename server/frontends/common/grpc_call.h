// What the gRPC front ends share around a call: the request log and admin token read from the
// call's metadata (the protocol-neutral parts are request_log.h and admin_auth.h), raw
// (ByteBuffer) messages parsed and serialized by the handler itself (so that bytes that do not
// parse get a precise INVALID_ARGUMENT instead of gRPC's empty UNIMPLEMENTED), and the frame of
// every unary handler (Unary, AdminUnary, on the typed calls ServeTypedUnary makes): start the log,
// check the admin token, run the body, finish with the converted status and one log line.
#pragma once

#include <grpcpp/server_context.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/proto_buffer_writer.h>

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "mha/status.h"
#include "proto/wire/status_convert.h"
#include "server/frontends/common/admin_auth.h"
#include "server/frontends/common/raw_message.h"
#include "server/frontends/common/request_log.h"
#include "server/frontends/cq/cq_unary.h"
#include "server/serving/inference.h"

namespace mha::serve {

// The helpers below take any call's context (ServerContextBase); every method of mha-server is on
// the completion-queue API (cq_unary.h, cq_stream.h).

// Reads or generates the request id and adds it to the call's initial metadata, with the
// client's traceparent when it is valid (call before the first write or Finish).
RequestLog StartRequest(grpc::ServerContextBase* context, const char* method);

// Every x-session-id value the call carries must equal `body_id` (CheckSessionHeader).
Status CheckSessionHeader(const grpc::ServerContextBase* context, const std::string& body_id);

// The call's deadline on the steady clock (time_point::max() when it has none).
Clock::time_point SteadyDeadline(const grpc::ServerContextBase* context);

// What every gRPC front end sets on a decoded request from its call, once: the start and request
// id (the log's), the call's deadline, and cancellation (on the completion-queue API the call
// reads as cancelled once its done event came back: CqUnaryMethod asks for it).
void StampRequest(grpc::ServerContextBase* context, const RequestLog& log,
                  InferenceRequest* request);

// AuthorizeAdmin on the call's "authorization" metadata.
Status AuthorizeAdmin(const grpc::ServerContextBase& context, const std::string& token);

// ParseRawMessage for a request: INVALID_ARGUMENT "request is not a valid <message's full name>
// (N bytes)" when the bytes do not parse.
template <typename Message>
Status ParseRawRequest(const grpc::ByteBuffer& bytes, Message* message) {
  if (ParseRawMessage(bytes, message)) return Status::Ok();
  return InvalidArgument("request is not a valid " + Message::descriptor()->full_name() + " (" +
                         std::to_string(bytes.Length()) + " bytes)");
}

template <typename Message>
Status SerializeRawMessage(const Message& message, grpc::ByteBuffer* out) {
  bool own_buffer = false;
  const grpc::Status s = grpc::SerializationTraits<Message>::Serialize(message, out, &own_buffer);
  return s.ok() ? Status::Ok() : Internal("encoding the response failed: " + s.error_message());
}

// A unary body's answer with the detail its success log line carries ("model=...").
struct UnaryAnswer {
  Status status;
  std::string detail;
};

// One call of a typed unary method (ServeTypedUnary), as its handler sees it: copyable; the request
// and response it was given live until the call is answered.
struct UnaryCall {
  CqCall* call;
  std::function<Status(grpc::ByteBuffer*)> serialize;  // the response, when answered OK
  grpc::ServerContext* context() const { return call->context(); }
};

// Finishes one unary call of the completion-queue API: logs the outcome (LogOutcome) and sends
// the converted status, with the response when it is OK (serialized first when the call is
// typed; a raw handler fills call->response() itself). Copyable, so that a callback can answer
// later. Call once.
class UnaryFinish {
 public:
  UnaryFinish(CqCall* call, RequestLog log) : call_(call), log_(std::move(log)) {}
  UnaryFinish(const UnaryCall& call, RequestLog log)
      : call_(call.call), serialize_(call.serialize), log_(std::move(log)) {}
  const RequestLog& log() const { return log_; }
  void operator()(const Status& status, const std::string& detail = "") const {
    Status answer = status;
    if (answer.ok() && serialize_) answer = serialize_(call_->response());
    LogOutcome(log_, answer, detail);
    call_->Finish(codec::ToGrpcStatus(answer));
  }
  void operator()(const UnaryAnswer& answer) const { (*this)(answer.status, answer.detail); }

 private:
  CqCall* call_;
  std::function<Status(grpc::ByteBuffer*)> serialize_;
  RequestLog log_;
};

namespace internal {

template <class F>
void RunUnary(const UnaryCall& call, const char* method, const std::string* admin_token, F&& body) {
  UnaryFinish finish(call, StartRequest(call.context(), method));
  if (admin_token != nullptr) {
    if (Status denied = AuthorizeAdmin(*call.context(), *admin_token); !denied.ok()) {
      return finish(denied);
    }
  }
  if constexpr (std::is_invocable_v<F>) {
    finish(std::forward<F>(body)());  // answers now: returns Status or UnaryAnswer
  } else {
    std::forward<F>(body)(finish);  // answers now or later by calling `finish` once
  }
}

template <class Request, class Response>
struct UnaryMessages {
  Request request;
  Response response;
};

}  // namespace internal

// The frame of a unary handler. `body` is either `Status()` / `UnaryAnswer()` (the call is
// answered with what it returns) or `void(const UnaryFinish&)` (it calls the finish once, now or
// from a callback; the log is finish.log()).
template <class F>
void Unary(const UnaryCall& call, const char* method, F&& body) {
  internal::RunUnary(call, method, nullptr, std::forward<F>(body));
}

// Unary behind the admin token (admin_auth.h): a call without it is answered with the denial
// and `body` does not run.
template <class F>
void AdminUnary(const UnaryCall& call, const char* method, const std::string& admin_token,
                F&& body) {
  internal::RunUnary(call, method, &admin_token, std::forward<F>(body));
}

// A typed unary method of `service` on `queue`: `request` is its generated
// `WithRawMethod_<M>::Request<M>`; each call's bytes are parsed (INVALID_ARGUMENT naming the
// message and its size when they do not, logged under `method`) and `handler(const UnaryCall&,
// const Request*, Response*)` runs, which answers through Unary or AdminUnary. These are the
// rarer calls (metadata, control, health): 8 requested at a time (gRPC holds a burst's others
// until then).
template <class Service, class RequestMember, class Request, class Response>
std::unique_ptr<CqUnaryMethod> ServeTypedUnary(CqQueue* queue, Service* service,
                                               RequestMember request, const char* method,
                                               void (Service::*handler)(const UnaryCall&,
                                                                        const Request*, Response*),
                                               CqUnaryMethod::Options options = {8}) {
  auto run = [service, handler, method](CqCall* call) {
    auto messages = std::make_shared<internal::UnaryMessages<Request, Response>>();
    const UnaryCall typed{call, [messages](grpc::ByteBuffer* out) {
                            return SerializeRawMessage(messages->response, out);
                          }};
    if (Status parsed = ParseRawRequest(call->request(), &messages->request); !parsed.ok()) {
      return UnaryFinish(call, StartRequest(call->context(), method))(parsed);
    }
    (service->*handler)(typed, &messages->request, &messages->response);
  };
  return ServeRawUnary(queue, service, request, std::move(run), options);
}

}  // namespace mha::serve
