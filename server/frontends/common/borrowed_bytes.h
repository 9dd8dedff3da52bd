// Responses whose big tensor bytes go to gRPC without a copy ("no copy of tensor bytes
// that a borrow or a direct write into the response buffer can avoid"; Triton's response
// allocator idea). The message is serialized without those bytes, then followed by the bytes as
// their own slice of the grpc::ByteBuffer, pointing into the tensor's memory; the buffer holds a
// reference to the tensor's owner until gRPC has sent it (a tensor without an owner is copied).
// What the receiver parses is the same message: protobuf merges the two occurrences of a singular
// embedded message field, and appends to a repeated one.
#pragma once

#include <google/protobuf/message_lite.h>
#include <grpcpp/support/byte_buffer.h>

#include <vector>

#include "mha/host_tensor.h"
#include "mha/status.h"

namespace mha::serve {

// Bytes to write after the message, as one field: `path` is the field numbers from the message
// down to the bytes field, e.g. {1, 3} = field 1 (an embedded message) -> its field 3 (bytes);
// {7} = a bytes field (or the next element of a repeated bytes field) of the message itself.
struct BorrowedField {
  std::vector<int> path;
  HostTensor bytes;  // its bytes are the field's data; its owner is kept until gRPC sent them
};

// `head` serialized, then each field in order. INTERNAL when serializing fails.
Status SerializeWithBorrowedBytes(const google::protobuf::MessageLite& head,
                                  std::vector<BorrowedField> fields, grpc::ByteBuffer* out);

}  // namespace mha::serve
