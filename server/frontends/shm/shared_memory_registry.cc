#include "server/frontends/shm/shared_memory_registry.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <utility>

#include "mha/device_memory.h"
#include "mha/text.h"
#include "server/frontends/shm/shm_fault_guard.h"

namespace mha::serve {

// Runs `run` when destroyed: the last region of an Unregister to be unmapped lets it go.
struct ShmUnmapHook {
  std::function<void()> run;
  explicit ShmUnmapHook(std::function<void()> f) : run(std::move(f)) {}
  ShmUnmapHook(const ShmUnmapHook&) = delete;
  ShmUnmapHook& operator=(const ShmUnmapHook&) = delete;
  ~ShmUnmapHook() {
    if (run) run();
  }
};

class ShmMapping {
 public:
  ShmMapping(ShmRegionSpec spec, int fd, void* base, size_t length, char* region, int slot,
             std::shared_ptr<SharedMemoryRegistry::Accounting> accounting)
      : spec_(std::move(spec)),
        fd_(fd),
        base_(base),
        length_(length),
        region_(region),
        slot_(slot),
        accounting_(std::move(accounting)) {}
  // A CUDA region: `device` keeps the IPC handle open (closed when the last holder lets go).
  ShmMapping(CudaShmRegionSpec spec, std::shared_ptr<const DeviceRegion> device,
             std::shared_ptr<SharedMemoryRegistry::Accounting> accounting)
      : spec_{spec.name, "", 0, spec.byte_size},
        cuda_{spec.name, "", spec.device_id, spec.byte_size},
        fd_(-1),
        base_(nullptr),
        length_(0),
        region_(static_cast<char*>(device->data())),
        slot_(-1),
        device_(std::move(device)),
        accounting_(std::move(accounting)) {}
  ShmMapping(const ShmMapping&) = delete;
  ShmMapping& operator=(const ShmMapping&) = delete;
  ~ShmMapping() {
    if (base_ != nullptr) {
      ShmFaultGuard::Unwatch(slot_);
      munmap(base_, length_);
      close(fd_);
    }
    device_.reset();  // cudaIpcCloseMemHandle
    accounting_->mapped -= static_cast<int64_t>(spec_.byte_size);
    std::vector<std::shared_ptr<ShmUnmapHook>> released;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      released.swap(released_);
    }
    released.clear();  // an Unregister's `done` runs here when this was its last region
  }

  const ShmRegionSpec& spec() const { return spec_; }
  const CudaShmRegionSpec& cuda() const { return cuda_; }
  ShmKind kind() const { return device_ ? ShmKind::kCuda : ShmKind::kSystem; }
  int device() const { return device_ ? device_->device() : -1; }
  char* region() const { return region_; }
  void OnUnmap(std::shared_ptr<ShmUnmapHook> release) const {
    std::lock_guard<std::mutex> lock(mutex_);
    released_.push_back(std::move(release));
  }
  Status Check() const;

 private:
  const ShmRegionSpec spec_;
  const CudaShmRegionSpec cuda_;
  const int fd_;
  void* const base_;
  const size_t length_;
  char* const region_;
  const int slot_;
  std::shared_ptr<const DeviceRegion> device_;
  const std::shared_ptr<SharedMemoryRegistry::Accounting> accounting_;
  mutable std::mutex mutex_;
  mutable std::vector<std::shared_ptr<ShmUnmapHook>> released_;
};

namespace {

std::string ErrnoText(int error) { return std::strerror(error); }

// A plain "/name": one leading slash, no other, not "." or "..", at most NAME_MAX bytes.
Status CheckKey(const std::string& key) {
  const bool plain = key.size() >= 2 && key.size() <= 255 && key[0] == '/' &&
                     key.find('/', 1) == std::string::npos && key.find('\0') == std::string::npos &&
                     key != "/." && key != "/..";
  if (plain) return Status::Ok();
  return InvalidArgument("key " + Quoted(key) +
                         " is not a plain shared-memory name (\"/name\": one leading '/', no "
                         "other '/', at most 255 bytes)");
}

// `offset` + `size` <= `limit`, without overflow.
bool Within(uint64_t offset, uint64_t size, uint64_t limit) {
  return offset <= limit && size <= limit - offset;
}

std::string Sum(uint64_t offset, uint64_t size) {
  const std::string parts = std::to_string(offset) + " + " + std::to_string(size);
  if (size > std::numeric_limits<uint64_t>::max() - offset) return parts + " (overflows)";
  return parts + " = " + std::to_string(offset + size);
}

// Opens the object of `spec` (read-write) and checks the region lies within it; the fd.
StatusOr<int> OpenObject(const ShmRegionSpec& spec, const std::string& what) {
  const int fd = shm_open(spec.key.c_str(), O_RDWR, 0);
  if (fd < 0) {
    const int error = errno;
    const std::string message = what + ": cannot open shared memory object " + Quoted(spec.key) +
                                " (shm_open: " + ErrnoText(error) + ")";
    if (error == ENOENT) return NotFound(message);
    if (error == EACCES) return PermissionDenied(message);
    return InvalidArgument(message);
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return InvalidArgument(what + ": " + Quoted(spec.key) + " is not a shared memory object");
  }
  const auto object_size = static_cast<uint64_t>(st.st_size);
  if (!Within(spec.offset, spec.byte_size, object_size)) {
    close(fd);
    return InvalidArgument(what + ": offset " + Sum(spec.offset, spec.byte_size) +
                           " is past the end of " + Quoted(spec.key) + " (" +
                           std::to_string(object_size) + " bytes)");
  }
  return fd;
}

}  // namespace

Status ShmMapping::Check() const {
  if (device_) return Status::Ok();  // device memory: no object to truncate
  const std::string what = "shared memory region " + Quoted(spec_.name);
  if (ShmFaultGuard::Faulted(slot_)) {
    return InvalidArgument(what + ": its object " + Quoted(spec_.key) +
                           " was truncated while registered (a page faulted); unregister it and "
                           "register it again");
  }
  struct stat st;
  if (fstat(fd_, &st) != 0) return Internal(what + ": fstat failed: " + ErrnoText(errno));
  const auto size = static_cast<uint64_t>(st.st_size);
  if (!Within(spec_.offset, spec_.byte_size, size)) {
    return InvalidArgument(what + ": its object " + Quoted(spec_.key) + " is now " +
                           std::to_string(size) + " bytes, the region needs offset " +
                           Sum(spec_.offset, spec_.byte_size) + " (truncated while registered)");
  }
  return Status::Ok();
}

Status ShmSlice::Check() const {
  return mapping ? mapping->Check() : Internal("shared memory slice without a region");
}

SharedMemoryRegistry::SharedMemoryRegistry(ShmRegistryOptions options) : options_(options) {}

SharedMemoryRegistry::~SharedMemoryRegistry() { Clear(); }

Status SharedMemoryRegistry::Register(const ShmRegionSpec& spec) {
  if (!allowed()) {
    return FailedPrecondition(
        "shared memory registration is off: start the server with --allow-client-shm=true");
  }
  if (spec.name.empty()) return InvalidArgument("name: a region needs a name");
  const std::string what = "region " + Quoted(spec.name);
  if (Status key = CheckKey(spec.key); !key.ok())
    return InvalidArgument(what + ": " + key.message());
  if (spec.byte_size == 0) return InvalidArgument(what + ": byte_size must be > 0");
  std::lock_guard<std::mutex> lock(mutex_);
  if (regions_.count(spec.name) != 0) return CheckNew(spec.name, spec.byte_size, "system");
  auto opened = OpenObject(spec, what);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  if (Status fits = CheckNew(spec.name, spec.byte_size, "system"); !fits.ok()) {
    close(fd);
    return fits;
  }
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t start = spec.offset - spec.offset % page;
  const auto length = static_cast<size_t>(spec.offset - start + spec.byte_size);
  void* base =
      mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(start));
  if (base == MAP_FAILED) {
    const int error = errno;
    close(fd);
    return InvalidArgument(what + ": cannot map " + Quoted(spec.key) +
                           " (mmap: " + ErrnoText(error) + ")");
  }
  auto slot = ShmFaultGuard::Watch(base, length);
  if (!slot.ok()) {
    munmap(base, length);
    close(fd);
    return slot.status();
  }
  accounting_->mapped += static_cast<int64_t>(spec.byte_size);
  char* region = static_cast<char*>(base) + (spec.offset - start);
  regions_[spec.name] =
      std::make_shared<ShmMapping>(spec, fd, base, length, region, *slot, accounting_);
  return Status::Ok();
}

Status SharedMemoryRegistry::CheckNew(const std::string& name, uint64_t byte_size,
                                      const char* kind) const {
  const std::string what = "region " + Quoted(name);
  if (const auto it = regions_.find(name); it != regions_.end()) {
    const char* has = it->second->kind() == ShmKind::kCuda ? "CUDA" : "system";
    const std::string other =
        std::string(kind) == has ? "" : std::string(" as a ") + has + " region";
    return AlreadyExists(what + " is registered already" + other + " (unregister it first)");
  }
  const auto budget = static_cast<uint64_t>(options_.max_shm_bytes);
  const auto in_use = static_cast<uint64_t>(accounting_->mapped.load());
  if (!Within(in_use, byte_size, budget)) {
    return ResourceExhausted(what + ": " + std::to_string(byte_size) + " bytes more would map " +
                             Sum(in_use, byte_size) + " bytes, over --max-shm-bytes " +
                             std::to_string(budget));
  }
  return Status::Ok();
}

Status SharedMemoryRegistry::RegisterCuda(const CudaShmRegionSpec& spec) {
  if (!allowed()) {
    return FailedPrecondition(
        "shared memory registration is off: start the server with --allow-client-shm=true");
  }
  if (spec.name.empty()) return InvalidArgument("name: a region needs a name");
  const std::string what = "CUDA region " + Quoted(spec.name);
  if (spec.device_id < 0 || spec.device_id > std::numeric_limits<int>::max()) {
    return InvalidArgument(what + ": device_id " + std::to_string(spec.device_id) +
                           " is not a device index");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  MHA_RETURN_IF_ERROR(CheckNew(spec.name, spec.byte_size, "CUDA"));
  auto opened =
      OpenCudaIpcRegion(spec.raw_handle, static_cast<int>(spec.device_id), spec.byte_size, what);
  if (!opened.ok()) return opened.status();
  accounting_->mapped += static_cast<int64_t>(spec.byte_size);
  regions_[spec.name] = std::make_shared<ShmMapping>(spec, std::move(opened.value()), accounting_);
  return Status::Ok();
}

void SharedMemoryRegistry::Unregister(const std::string& name, std::function<void()> done,
                                      ShmKind kind) {
  auto release = std::make_shared<ShmUnmapHook>(std::move(done));
  std::vector<std::shared_ptr<ShmMapping>> removed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = regions_.begin(); it != regions_.end();) {
      const bool of_kind = kind == ShmKind::kAll || it->second->kind() == kind;
      if (of_kind && (name.empty() || it->first == name)) {
        removed.push_back(std::move(it->second));
        it = regions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const auto& mapping : removed) mapping->OnUnmap(release);
  release.reset();
  removed.clear();  // unmaps each region no request holds; `done` runs when all are unmapped
}

void SharedMemoryRegistry::Clear() {
  std::mutex m;
  std::condition_variable unmapped;
  bool all = false;
  Unregister(
      "",
      [&] {
        std::lock_guard<std::mutex> lock(m);
        all = true;
        unmapped.notify_all();
      },
      ShmKind::kAll);
  std::unique_lock<std::mutex> lock(m);
  unmapped.wait(lock, [&] { return all; });
}

template <class Spec, class GetSpec>
StatusOr<std::vector<Spec>> SharedMemoryRegistry::ListRegions(const std::string& name, ShmKind kind,
                                                              const char* what,
                                                              GetSpec spec) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Spec> out;
  for (const auto& [region, mapping] : regions_) {
    const bool wanted = name.empty() || region == name;
    if (wanted && mapping->kind() == kind) out.push_back(spec(*mapping));
  }
  if (!name.empty() && out.empty()) {
    return NotFound(std::string(what) + " region " + Quoted(name) + " is not registered (" +
                    (kind == ShmKind::kCuda ? "CUDA" : "system") + " regions: " + Names(kind) +
                    ")");
  }
  return out;
}

StatusOr<std::vector<ShmRegionSpec>> SharedMemoryRegistry::Regions(const std::string& name) const {
  return ListRegions<ShmRegionSpec>(name, ShmKind::kSystem, "shared memory",
                                    [](const ShmMapping& m) { return m.spec(); });
}

StatusOr<std::vector<CudaShmRegionSpec>> SharedMemoryRegistry::CudaRegions(
    const std::string& name) const {
  return ListRegions<CudaShmRegionSpec>(name, ShmKind::kCuda, "CUDA shared memory",
                                        [](const ShmMapping& m) { return m.cuda(); });
}

StatusOr<ShmSlice> SharedMemoryRegistry::Acquire(std::string_view field, const std::string& region,
                                                 uint64_t offset, uint64_t byte_size) const {
  const std::string where = std::string(field) + ": ";
  std::shared_ptr<const ShmMapping> mapping;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = regions_.find(region);
    if (it == regions_.end()) {
      return NotFound(where + "shared memory region " + Quoted(region) +
                      " is not registered (registered: " + Names() + ")" +
                      (allowed() ? "" : "; registration is off (--allow-client-shm)"));
    }
    mapping = it->second;
  }
  const uint64_t size = mapping->spec().byte_size;
  if (!Within(offset, byte_size, size)) {
    return InvalidArgument(where + "shared_memory_offset + shared_memory_byte_size " +
                           Sum(offset, byte_size) + " is past the end of region " + Quoted(region) +
                           " (" + std::to_string(size) + " bytes)");
  }
  if (Status intact = mapping->Check(); !intact.ok()) {
    return InvalidArgument(where + intact.message());
  }
  ShmSlice slice;
  slice.data = mapping->region() + offset;
  slice.bytes = static_cast<size_t>(byte_size);
  slice.region = region;
  slice.offset = offset;
  slice.device = mapping->device();
  slice.mapping = std::move(mapping);
  return slice;
}

std::string SharedMemoryRegistry::Names(ShmKind kind) const {
  std::string names;
  for (const auto& [name, mapping] : regions_) {
    if (kind != ShmKind::kAll && mapping->kind() != kind) continue;
    names += (names.empty() ? "" : ", ") + Quoted(name);
  }
  return names.empty() ? "none" : names;
}

}  // namespace mha::serve
