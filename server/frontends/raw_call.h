// What the raw (ByteBuffer) unary handlers of every gRPC front end share: parse the request bytes
// themselves (so that bytes that do not parse get a precise INVALID_ARGUMENT instead of gRPC's
// empty UNIMPLEMENTED), serialize the response, and finish the call with its one log line.
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>
#include <grpcpp/support/server_callback.h>

#include <string>

#include "mha/status.h"
#include "proto/wire/status_convert.h"
#include "server/frontends/grpc_v1/request_log.h"

namespace mha::serve {

// Parses `bytes` into `message` without copying the slices.
template <typename Message>
bool ParseRawMessage(const grpc::ByteBuffer& bytes, Message* message) {
  grpc::ByteBuffer shared(bytes);  // shares the slices, no copy
  grpc::ProtoBufferReader reader(&shared);
  return message->ParseFromZeroCopyStream(&reader);
}

template <typename Message>
Status SerializeRawMessage(const Message& message, grpc::ByteBuffer* out) {
  bool own_buffer = false;
  const grpc::Status s = grpc::SerializationTraits<Message>::Serialize(message, out, &own_buffer);
  return s.ok() ? Status::Ok() : Internal("encoding the response failed: " + s.error_message());
}

// Logs the outcome (LogOutcome) and finishes the call with the converted status.
inline void FinishCall(grpc::ServerUnaryReactor* reactor, const RequestLog& log,
                       const Status& status, const std::string& detail = "") {
  LogOutcome(log, status, detail);
  reactor->Finish(codec::ToGrpcStatus(status));
}

}  // namespace mha::serve
