// One way to print a shape in messages: "[2, 5, 16]". Torch-free (the wire library and the client
// use it too); works with std::vector<int64_t>, c10::IntArrayRef and braced lists.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace mha {

std::string ShapeString(const int64_t* dims, size_t rank);

template <typename Dims>
std::string ShapeString(const Dims& dims) {
  return ShapeString(dims.data(), dims.size());
}
inline std::string ShapeString(std::initializer_list<int64_t> dims) {
  return ShapeString(dims.begin(), dims.size());
}

}  // namespace mha
