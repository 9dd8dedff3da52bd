// Private to mha_core: a zip reader adapter over bytes in memory. Unlike LibTorch's
// MemoryReadAdapter it never reads past the end (a short read, as from a file), so a zip
// directory that points outside the buffer is an error rather than an overread.
#pragma once

#include <caffe2/serialize/read_adapter_interface.h>

#include <cstring>

namespace mha::internal {

class BoundedMemoryAdapter final : public caffe2::serialize::ReadAdapterInterface {
 public:
  BoundedMemoryAdapter(const void* data, size_t size)
      : data_(static_cast<const char*>(data)), size_(size) {}
  size_t size() const override { return size_; }
  size_t read(uint64_t pos, void* buf, size_t n, const char* what = "") const override {
    if (pos >= size_) return 0;
    if (n > size_ - pos) n = size_ - pos;
    if (n > 0) std::memcpy(buf, data_ + pos, n);
    return n;
  }

 private:
  const char* data_;
  size_t size_;
};

}  // namespace mha::internal
