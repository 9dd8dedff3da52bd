// Triton's system and CUDA shared-memory extensions, protocol-neutral (the OIP gRPC and REST front
// ends share one registry): a client creates a POSIX shared-memory object (shm_open "/name"),
// registers a region of it (name, key, offset, byte_size), then names the region in an inference
// request's tensor parameters instead of sending the bytes. Inputs are read from the mapping
// (borrowed, no copy), outputs written into it.
//
// Safety (docs/shared-memory.md):
//  - registration is off unless the server runs with --allow-client-shm=true;
//  - mapped bytes count against --max-shm-bytes;
//  - a request holds its regions (ShmSlice keeps the mapping): Unregister removes the name at
//    once, but unmaps only when the last request holding the region lets go, and says so then
//    (its `done`); every region is unmapped when the registry is destroyed or cleared;
//  - a client that truncates its object while registered gets errors, never a crash: the object's
//    size is checked (fstat) when a request takes a region and again when it is answered, and
//    pages past the new end that fault are caught by ShmFaultGuard (shm_fault_guard.h).
// CUDA regions (RegisterCuda: a cudaIpcMemHandle_t opened on a device, mha/device_memory.h) share
// the names, the budget, the holding rule and the closing at shutdown; their slices carry a device
// pointer (ShmSlice::device >= 0) that only the core dereferences.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "mha/status.h"

namespace mha::serve {

struct ShmRegionSpec {
  std::string name;  // the region's name in requests
  std::string key;   // the shared-memory object: a plain "/name"
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};

struct CudaShmRegionSpec {
  std::string name;
  std::string raw_handle;  // a cudaIpcMemHandle_t's 64 bytes (not kept: Regions answer it empty)
  int64_t device_id = 0;
  uint64_t byte_size = 0;
};

enum class ShmKind { kSystem, kCuda, kAll };

struct ShmRegistryOptions {
  bool allow_client_shm = false;             // --allow-client-shm
  int64_t max_shm_bytes = int64_t{1} << 30;  // --max-shm-bytes: registered bytes at once
};

class ShmMapping;  // one registered region's mapping (shared_memory_registry.cc)

// Bytes of a registered region that a request uses; the mapping stays while a slice holds it.
struct ShmSlice {
  std::shared_ptr<const ShmMapping> mapping;
  char* data = nullptr;
  size_t bytes = 0;
  std::string region;
  uint64_t offset = 0;  // of `data` in the region
  int device = -1;      // a CUDA region's device: `data` is a device pointer; -1: host memory
  bool on_device() const { return device >= 0; }
  // OK while the region is intact: its object still covers it and none of its pages faulted.
  Status Check() const;
};

class SharedMemoryRegistry {
 public:
  explicit SharedMemoryRegistry(ShmRegistryOptions options);
  ~SharedMemoryRegistry();  // Clear()
  SharedMemoryRegistry(const SharedMemoryRegistry&) = delete;
  SharedMemoryRegistry& operator=(const SharedMemoryRegistry&) = delete;

  bool allowed() const { return options_.allow_client_shm; }
  // Opens, checks and maps the region. FAILED_PRECONDITION when registration is off;
  // INVALID_ARGUMENT for an empty name, a key that is not a plain "/name", byte_size 0, offset +
  // byte_size past the object (overflow-safe); ALREADY_EXISTS for a name registered;
  // NOT_FOUND when no object has the key; RESOURCE_EXHAUSTED over --max-shm-bytes.
  Status Register(const ShmRegionSpec& spec);
  // Opens a CUDA region (mha::OpenCudaIpcRegion on device_id). The same refusals as Register for
  // registration off, the name, a name taken (by either kind) and the budget; INVALID_ARGUMENT
  // for a raw_handle not 64 bytes, a device_id out of range; FAILED_PRECONDITION in a build
  // without CUDA shared memory (mha::CudaShmBuilt()).
  Status RegisterCuda(const CudaShmRegionSpec& spec);
  // Removes `name` ("" = every region of `kind`) from the registry now: requests that name it from
  // now on get NOT_FOUND. `done` runs once every removed region is unmapped: at once, or when the
  // last request holding one lets go (on that request's thread). A name not registered is OK
  // (nothing to remove), as Triton answers.
  void Unregister(const std::string& name, std::function<void()> done,
                  ShmKind kind = ShmKind::kSystem);
  // Unregister("", ShmKind::kAll) that waits until every region is unmapped (shutdown).
  void Clear();
  // The regions, by name ("" = all): NOT_FOUND for a name not registered.
  StatusOr<std::vector<ShmRegionSpec>> Regions(const std::string& name) const;
  // The CUDA regions, the same way (raw_handle empty).
  StatusOr<std::vector<CudaShmRegionSpec>> CudaRegions(const std::string& name) const;
  // `byte_size` bytes at `offset` of region `region`, for the tensor `field`: NOT_FOUND when not
  // registered; INVALID_ARGUMENT past the region's end (overflow-safe) or when the region is no
  // longer intact (ShmSlice::Check).
  StatusOr<ShmSlice> Acquire(std::string_view field, const std::string& region, uint64_t offset,
                             uint64_t byte_size) const;
  int64_t mapped_bytes() const { return accounting_->mapped.load(); }

  struct Accounting {
    std::atomic<int64_t> mapped{0};
  };

 private:
  // The registered names of `kind`, for messages (mutex_ held).
  std::string Names(ShmKind kind = ShmKind::kAll) const;
  // Registration off, an empty name, a name taken, over the budget: the refusal or OK (mutex_
  // held). `kind` names the kind in messages.
  Status CheckNew(const std::string& name, uint64_t byte_size, const char* kind) const;
  // The regions of `kind` named `name` ("" = all) as `spec(mapping)` gives them; NOT_FOUND for a
  // name not registered as that kind (`what`: "shared memory" or "CUDA shared memory").
  template <class Spec, class GetSpec>
  StatusOr<std::vector<Spec>> ListRegions(const std::string& name, ShmKind kind, const char* what,
                                          GetSpec spec) const;

  const ShmRegistryOptions options_;
  std::shared_ptr<Accounting> accounting_ = std::make_shared<Accounting>();
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<ShmMapping>> regions_;
};

}  // namespace mha::serve
