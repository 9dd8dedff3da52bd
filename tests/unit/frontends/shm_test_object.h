// A client's POSIX shared-memory object for the shared-memory tests: created with a unique
// "/name", mapped on the client side, unlinked when the test ends.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <string>

namespace mha::testing {

class ShmTestObject {
 public:
  explicit ShmTestObject(size_t size) : size_(size) {
    static std::atomic<int> next{0};
    key_ = "/mha_unit_" + std::to_string(getpid()) + "_" + std::to_string(next++);
    fd_ = shm_open(key_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd_ >= 0 && ftruncate(fd_, static_cast<off_t>(size)) == 0) {
      void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
      data_ = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
    }
  }
  ~ShmTestObject() {
    if (data_ != nullptr) munmap(data_, size_);
    if (fd_ >= 0) close(fd_);
    shm_unlink(key_.c_str());
  }
  ShmTestObject(const ShmTestObject&) = delete;
  ShmTestObject& operator=(const ShmTestObject&) = delete;

  bool ok() const { return data_ != nullptr; }
  const std::string& key() const { return key_; }
  char* data() const { return data_; }  // the client's view (valid while not truncated)
  size_t size() const { return size_; }
  // The client shrinks its object while the server has it mapped.
  bool Truncate(size_t size) const { return ftruncate(fd_, static_cast<off_t>(size)) == 0; }

 private:
  std::string key_;
  size_t size_;
  int fd_ = -1;
  char* data_ = nullptr;
};

}  // namespace mha::testing
