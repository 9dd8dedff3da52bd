// Wire tensors built by hand (to send malformed ones on purpose): shared by the in-process
// front-end tests (tests/unit/frontends) and the service tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mha/v1/attention.pb.h"

namespace mha::testing {

// A FLOAT32 wire tensor of `shape` (all elements `value`); `bytes` overrides the data size.
inline v1::Tensor WireFloat(const std::vector<int64_t>& shape, float value = 0.5f,
                            int64_t bytes = -1) {
  v1::Tensor t;
  t.set_dtype(v1::FLOAT32);
  int64_t n = 1;
  for (int64_t d : shape) {
    t.add_shape(d);
    n *= d;
  }
  std::vector<float> data(static_cast<size_t>(n > 0 ? n : 0), value);
  std::string raw(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
  if (bytes >= 0) raw.resize(static_cast<size_t>(bytes));
  t.set_data(raw);
  return t;
}

// A wire tensor of `shape` whose every byte is `byte` (BOOL 0/1, or zeros of any dtype).
inline v1::Tensor WireBytes(v1::DataType dtype, size_t element_size,
                            const std::vector<int64_t>& shape, unsigned char byte = 0) {
  v1::Tensor t;
  t.set_dtype(dtype);
  int64_t n = 1;
  for (int64_t d : shape) {
    t.add_shape(d);
    n *= d;
  }
  t.set_data(std::string(static_cast<size_t>(n) * element_size, static_cast<char>(byte)));
  return t;
}

inline v1::Tensor WireBool(const std::vector<int64_t>& shape, unsigned char value = 0) {
  return WireBytes(v1::BOOL, 1, shape, value);
}

}  // namespace mha::testing
