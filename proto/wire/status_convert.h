// The one place where mha::Status becomes grpc::Status (and back, for the client library).
// The code numbers are gRPC's, so the mapping is one-to-one.
#pragma once

#include <grpcpp/support/status.h>

#include "mha/status.h"

namespace mha::codec {

grpc::Status ToGrpcStatus(const Status& status);
Status FromGrpcStatus(const grpc::Status& status);
const char* GrpcCodeName(grpc::StatusCode code);

}  // namespace mha::codec
