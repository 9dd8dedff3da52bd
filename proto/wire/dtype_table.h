// The wire dtypes, once: mha.v1 DataType <-> its name ("float32") <-> the Open Inference
// Protocol's datatype name ("FP32") <-> element size <-> the core's DType (floating types).
// Torch-free (target mha_wire): the client library, every front end and the codec read it; the
// core's tensor adapter maps ElementType to ATen.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "mha/host_tensor.h"
#include "mha/options.h"
#include "mha/v1/attention.pb.h"

namespace mha::codec {

struct DTypeInfo {
  v1::DataType wire;
  const char* name;      // mha.v1's: "float32", "float16", "bfloat16", "bool", "int32", "int64"
  const char* oip_name;  // the Open Inference Protocol's: "FP32", "FP16", "BF16", "BOOL", ...
  size_t element_size;   // bytes
  ElementType element;   // the core's element type (host tensors)
  std::optional<DType> core;  // the floating types
  bool input;  // requests may carry it (INT32/INT64 are top-k indices, which only go out)
};

// Every wire dtype (DATA_TYPE_UNSPECIFIED is none of them).
const DTypeInfo* DTypeTableBegin();
const DTypeInfo* DTypeTableEnd();

// The row of a v1::DataType value, or nullptr.
const DTypeInfo* FindDType(int wire);
// The row of an Open Inference Protocol datatype name, or nullptr.
const DTypeInfo* FindOipDType(std::string_view oip_name);
// The row of a core dtype / element type (always one).
const DTypeInfo& DTypeOf(DType dtype);
const DTypeInfo& DTypeOf(ElementType type);

// The Open Inference Protocol's name of a v1::DataType value; "" for anything else.
const char* OipDatatypeName(int wire);

}  // namespace mha::codec
