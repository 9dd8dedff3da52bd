// gRPC server reflection (grpc.reflection.v1alpha.ServerReflection, what grpcurl and Postman ask
// when they have no .proto files) on the completion-queue API (the app's CqQueue). Debian's gRPC
// has the service only as a synchronous one, whose threads wait on the process's epoll set beside
// the queue's leader and take its calls' events (docs/performance.md); this one answers the same
// from protobuf's generated descriptor pool: the services served, a file by name or by a symbol it
// defines (with every file it imports), extensions. A name that is not there is answered in the
// stream with NOT_FOUND (ErrorResponse), as gRPC's service does; the stream goes on.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "server/frontends/cq/cq_stream.h"

namespace mha::serve {

namespace internal {
using ReflectionBase =
    grpc::reflection::v1alpha::ServerReflection::WithRawMethod_ServerReflectionInfo<
        grpc::reflection::v1alpha::ServerReflection::Service>;
}  // namespace internal

class ReflectionService final : public internal::ReflectionBase {
 public:
  // `services`: the full names list_services answers (this service's own is added).
  ReflectionService(CqQueue* queue, std::vector<std::string> services);

  // The answer to one request (the protocol's rules; public for the unit test).
  grpc::reflection::v1alpha::ServerReflectionResponse Answer(
      const grpc::reflection::v1alpha::ServerReflectionRequest& request) const;

 private:
  const std::vector<std::string> services_;
  std::unique_ptr<CqStreamMethod> stream_;
};

}  // namespace mha::serve
