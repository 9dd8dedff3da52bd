// A raw (ByteBuffer) message parsed without copying its slices: what every method served raw
// (grpc_call.h's unary frames, cq_stream.h's typed reads) parses its requests with.
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/proto_buffer_reader.h>

namespace mha::serve {

// Parses `bytes` into `message` without copying the slices.
template <typename Message>
bool ParseRawMessage(const grpc::ByteBuffer& bytes, Message* message) {
  grpc::ByteBuffer shared(bytes);  // shares the slices, no copy
  grpc::ProtoBufferReader reader(&shared);
  return message->ParseFromZeroCopyStream(&reader);
}

}  // namespace mha::serve
