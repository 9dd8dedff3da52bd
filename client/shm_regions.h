// `mha-client forward|bench|afd --shm`: the client side of Triton's system shared-memory extension
// (docs/shared-memory.md). A ShmObject is one POSIX shared-memory object of the client's own
// ("/<name>-<pid>"), mapped here and registered with the server as region "<name>-<pid>"
// through the Open Inference Protocol's SystemSharedMemoryRegister (the server has one registry:
// mha.v1 requests name the same regions); its destructor unregisters and unlinks it.
//
// ShmRegions (bench, forward) holds two of them: it writes each request's inputs into the input
// region once, and rewrites the requests to name the regions instead of carrying bytes: inputs
// from the input region, `output` into the output region (a benchmark's calls all write the same
// place and do not read it back; `forward` reads it), other outputs in-band. Requests of either
// protocol: a ModelInferRequest's parameters, or an mha.v1 ForwardRequest's Tensor.shared_memory
// and output_shared_memory. Torch-free.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "inference/grpc_service.grpc.pb.h"
#include "mha/status.h"
#include "mha/v1/attention.pb.h"

namespace mha::client {

class ShmObject {
 public:
  // Creates, sizes and maps the object, then registers it as region "<name>-<pid>" through
  // `stub` (not owned; outlives this).
  static StatusOr<std::unique_ptr<ShmObject>> Create(
      inference::GRPCInferenceService::StubInterface* stub, const std::string& name, size_t size);
  ~ShmObject();
  ShmObject(const ShmObject&) = delete;
  ShmObject& operator=(const ShmObject&) = delete;

  const std::string& name() const { return name_; }  // the region's
  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  ShmObject() = default;
  inference::GRPCInferenceService::StubInterface* stub_ = nullptr;
  std::string name_, key_;
  size_t size_ = 0;
  char* data_ = nullptr;
  bool registered_ = false;
};

class ShmRegions {
 public:
  // Objects sized for `requests` (their raw inputs, and twice the largest query for the output).
  static StatusOr<std::unique_ptr<ShmRegions>> Create(
      inference::GRPCInferenceService::StubInterface* stub,
      const std::vector<inference::ModelInferRequest>& requests);
  // The same for mha.v1 requests (their input tensors' data, in RewriteV1's order).
  static StatusOr<std::unique_ptr<ShmRegions>> CreateV1(
      inference::GRPCInferenceService::StubInterface* stub,
      const std::vector<v1::ForwardRequest>& requests);

  // Request `index` of the pool given to Create, rewritten to use the regions.
  Status Rewrite(size_t index, inference::ModelInferRequest* request) const;
  // Request `index` of the pool given to CreateV1: query, key, value, key_padding_mask and
  // attn_mask (those present) from the input region, output into the output region at 0.
  Status RewriteV1(size_t index, v1::ForwardRequest* request) const;

  const ShmObject& output() const { return *out_; }

 private:
  ShmRegions() = default;
  static StatusOr<std::unique_ptr<ShmRegions>> Make(
      inference::GRPCInferenceService::StubInterface* stub,
      const std::vector<std::vector<std::string_view>>& inputs);

  std::unique_ptr<ShmObject> in_, out_;
  std::vector<std::vector<size_t>> offsets_;  // per request, per input
};

}  // namespace mha::client
