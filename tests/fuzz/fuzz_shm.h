// A shared-memory registry for the fuzzers of mha.v1 messages (Tensor.shared_memory, the output
// places; docs/shared-memory.md): one region "fuzz" of 64 KiB, a POSIX object made once and
// unlinked at once (the mapping keeps it), so that tensors naming it are read from it and outputs
// written into it, and every other name, offset or size takes the refusals' paths.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>

#include "server/frontends/shm/shared_memory_registry.h"

inline const mha::serve::SharedMemoryRegistry* FuzzShmRegistry() {
  static const mha::serve::SharedMemoryRegistry* registry = [] {
    constexpr uint64_t kBytes = 65536;
    // Lives for the process (a reachable pointer), as the fuzzers' server cores do.
    auto* r = new mha::serve::SharedMemoryRegistry(mha::serve::ShmRegistryOptions{true, 1 << 20});
    const std::string key = "/mha-fuzz-" + std::to_string(getpid());
    const int fd = shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0) {
      if (ftruncate(fd, static_cast<off_t>(kBytes)) == 0) {
        (void)r->Register(mha::serve::ShmRegionSpec{"fuzz", key, 0, kBytes});
      }
      close(fd);
      shm_unlink(key.c_str());
    }
    return r;
  }();
  return registry;
}
