// `mha-client bench --shm` (with --protocol oip): the client side of Triton's system
// shared-memory extension (docs/shared-memory.md). ShmRegions creates two POSIX shared-memory
// objects of its own ("/mha-client-<pid>-in", "-out"), registers them with the server, writes
// each request's inputs into the input region once, and rewrites the requests to name the
// regions instead of carrying bytes: inputs from the input region, `output` into the output
// region (every call writes the same place: a benchmark does not read it back), other outputs
// in-band. The destructor unregisters and unlinks both. Torch-free.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "inference/grpc_service.grpc.pb.h"
#include "mha/status.h"

namespace mha::client {

class ShmRegions {
 public:
  // Objects sized for `requests` (their raw inputs, and twice the largest query for the output),
  // registered through `stub` (not owned; outlives this).
  static StatusOr<std::unique_ptr<ShmRegions>> Create(
      inference::GRPCInferenceService::StubInterface* stub,
      const std::vector<inference::ModelInferRequest>& requests);
  ~ShmRegions();
  ShmRegions(const ShmRegions&) = delete;
  ShmRegions& operator=(const ShmRegions&) = delete;

  // Request `index` of the pool given to Create, rewritten to use the regions.
  Status Rewrite(size_t index, inference::ModelInferRequest* request) const;

 private:
  struct Object {
    std::string key;
    size_t size = 0;
    char* data = nullptr;
  };
  ShmRegions() = default;
  Status Open(Object* object, const std::string& key, size_t size);
  Status Register(const std::string& name, const Object& object);

  inference::GRPCInferenceService::StubInterface* stub_ = nullptr;
  Object in_, out_;
  std::vector<std::vector<size_t>> offsets_;  // per request, per raw input
  std::vector<std::string> registered_;
};

}  // namespace mha::client
