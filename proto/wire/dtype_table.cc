#include "proto/wire/dtype_table.h"

#include <iterator>

namespace mha::codec {
namespace {

const DTypeInfo kDTypes[] = {
    {v1::FLOAT32, "float32", "FP32", 4, ElementType::kFloat32, DType::kFloat32, true},
    {v1::FLOAT16, "float16", "FP16", 2, ElementType::kFloat16, DType::kFloat16, true},
    {v1::BFLOAT16, "bfloat16", "BF16", 2, ElementType::kBFloat16, DType::kBFloat16, true},
    {v1::BOOL, "bool", "BOOL", 1, ElementType::kBool, std::nullopt, true},
    {v1::INT32, "int32", "INT32", 4, ElementType::kInt32, std::nullopt, false},
    {v1::INT64, "int64", "INT64", 8, ElementType::kInt64, std::nullopt, false},
};

}  // namespace

const DTypeInfo* DTypeTableBegin() { return std::begin(kDTypes); }
const DTypeInfo* DTypeTableEnd() { return std::end(kDTypes); }

const DTypeInfo* FindDType(int wire) {
  for (const DTypeInfo& d : kDTypes) {
    if (d.wire == wire) return &d;
  }
  return nullptr;
}

const DTypeInfo* FindOipDType(std::string_view oip_name) {
  for (const DTypeInfo& d : kDTypes) {
    if (oip_name == d.oip_name) return &d;
  }
  return nullptr;
}

const DTypeInfo& DTypeOf(DType dtype) {
  for (const DTypeInfo& d : kDTypes) {
    if (d.core == dtype) return d;
  }
  return kDTypes[0];  // unreachable: every DType has a row
}

const DTypeInfo& DTypeOf(ElementType type) {
  for (const DTypeInfo& d : kDTypes) {
    if (d.element == type) return d;
  }
  return kDTypes[0];  // unreachable: every ElementType has a row
}

const char* OipDatatypeName(int wire) {
  const DTypeInfo* d = FindDType(wire);
  return d != nullptr ? d->oip_name : "";
}

}  // namespace mha::codec
