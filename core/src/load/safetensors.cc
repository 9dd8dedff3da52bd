// safetensors: u64 little-endian header length N, N bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data.
// Everything in the header is checked (with overflow-safe arithmetic) before any tensor is
// allocated, so a hostile or truncated file is an INVALID_ARGUMENT naming the file and key.
#include <ATen/ATen.h>

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "load/json_text.h"
#include "mha/config_reader.h"
#include "mha/loader.h"

namespace mha {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference implementation's limit

struct DTypeInfo {
  const char* name;
  at::ScalarType type;
  int64_t bytes;
};

constexpr DTypeInfo kDTypes[] = {
    {"F32", at::kFloat, 4},  {"F16", at::kHalf, 2}, {"BF16", at::kBFloat16, 2},
    {"F64", at::kDouble, 8}, {"I64", at::kLong, 8}, {"I32", at::kInt, 4},
    {"I16", at::kShort, 2},  {"I8", at::kChar, 1},  {"U8", at::kByte, 1},
    {"BOOL", at::kBool, 1},
};

const DTypeInfo* FindDType(const std::string& name) {
  for (const auto& info : kDTypes) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

const DTypeInfo* FindDType(at::ScalarType type) {
  for (const auto& info : kDTypes) {
    if (type == info.type) return &info;
  }
  return nullptr;
}

bool MulOverflows(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return true;
  *out = a * b;
  return false;
}

uint64_t ReadU64LE(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// One tensor's header entry after validation.
struct Entry {
  std::string name;
  const DTypeInfo* dtype;
  std::vector<int64_t> shape;
  uint64_t begin;
  uint64_t end;
};

Status ParseEntry(const std::string& path, const std::string& name, const nlohmann::json& spec,
                  uint64_t data_bytes, Entry* entry) {
  const std::string where = path + ": tensor '" + name + "'";
  if (!spec.is_object()) return InvalidArgument(where + ": header entry is not an object");
  auto dtype_it = spec.find("dtype");
  if (dtype_it == spec.end() || !dtype_it->is_string()) {
    return InvalidArgument(where + ": missing or non-string \"dtype\"");
  }
  entry->name = name;
  entry->dtype = FindDType(dtype_it->get<std::string>());
  if (entry->dtype == nullptr) {
    return InvalidArgument(where + ": unsupported dtype '" + dtype_it->get<std::string>() +
                           "' (supported: F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL)");
  }
  auto shape_it = spec.find("shape");
  if (shape_it == spec.end() || !shape_it->is_array()) {
    return InvalidArgument(where + ": missing or non-array \"shape\"");
  }
  uint64_t count = 1;
  for (const auto& dim : *shape_it) {
    if (!dim.is_number_integer() || dim.get<int64_t>() < 0) {
      // Not shape_it->dump(): a hostile shape can nest deep enough to overflow dump()'s recursion.
      return InvalidArgument(where + ": shape dimension " + std::to_string(entry->shape.size()) +
                             " is " + JsonForMessage(dim) + ", not a non-negative integer");
    }
    const int64_t d = dim.get<int64_t>();
    if (MulOverflows(count, static_cast<uint64_t>(d), &count)) {
      return InvalidArgument(where + ": shape overflows at dimension " +
                             std::to_string(entry->shape.size()));
    }
    entry->shape.push_back(d);
  }
  uint64_t nbytes = 0;
  if (MulOverflows(count, static_cast<uint64_t>(entry->dtype->bytes), &nbytes) ||
      nbytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return InvalidArgument(where + ": shape " + shape_it->dump() + " overflows");
  }
  auto offsets_it = spec.find("data_offsets");
  if (offsets_it == spec.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
    return InvalidArgument(where + ": \"data_offsets\" must be two non-negative integers");
  }
  entry->begin = (*offsets_it)[0].get<uint64_t>();
  entry->end = (*offsets_it)[1].get<uint64_t>();
  if (entry->begin > entry->end || entry->end > data_bytes) {
    return InvalidArgument(where + ": data_offsets " + offsets_it->dump() +
                           " out of range of the " + std::to_string(data_bytes) +
                           "-byte data section (truncated file?)");
  }
  if (entry->end - entry->begin != nbytes) {
    return InvalidArgument(where + ": data_offsets " + offsets_it->dump() + " span " +
                           std::to_string(entry->end - entry->begin) + " bytes but " +
                           entry->dtype->name + " " + shape_it->dump() + " needs " +
                           std::to_string(nbytes));
  }
  return Status::Ok();
}

// The reader proper, over any seekable stream; `path` only names the source in messages. Every
// entry of the header is checked; only those `keep` accepts (all when it is empty) are read.
StatusOr<TensorMap> ReadSafetensorsStream(std::istream& in, const std::string& path,
                                          const TensorFilter& keep = {}) {
  try {
    in.seekg(0, std::ios::end);
    const auto file_size = static_cast<uint64_t>(in.tellg());
    in.seekg(0);
    unsigned char len_bytes[8];
    if (file_size < 8 || !in.read(reinterpret_cast<char*>(len_bytes), 8)) {
      return InvalidArgument(path + ": too short for a safetensors file (" +
                             std::to_string(file_size) + " bytes)");
    }
    const uint64_t header_len = ReadU64LE(len_bytes);
    if (header_len > file_size - 8 || header_len > kMaxHeaderBytes) {
      return InvalidArgument(path + ": safetensors header length " + std::to_string(header_len) +
                             " exceeds the file size " + std::to_string(file_size) +
                             " (truncated or not a safetensors file)");
    }
    std::string header(header_len, '\0');
    if (!in.read(header.data(), static_cast<std::streamsize>(header_len))) {
      return InvalidArgument(path + ": cannot read the safetensors header");
    }
    const std::string too_deep = internal::JsonDepthError(header, path, "safetensors header");
    if (!too_deep.empty()) return InvalidArgument(too_deep);
    nlohmann::json json = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded())
      return InvalidArgument(path + ": safetensors header is not valid JSON");
    if (!json.is_object())
      return InvalidArgument(path + ": safetensors header is not a JSON object");

    const uint64_t data_start = 8 + header_len;
    const uint64_t data_bytes = file_size - data_start;
    std::vector<Entry> entries;
    for (auto it = json.begin(); it != json.end(); ++it) {
      if (it.key() == "__metadata__") continue;
      Entry entry;
      MHA_RETURN_IF_ERROR(ParseEntry(path, it.key(), it.value(), data_bytes, &entry));
      entries.push_back(std::move(entry));
    }

    TensorMap tensors;
    for (const Entry& entry : entries) {
      if (keep && !keep(entry.name)) continue;
      at::Tensor t = at::empty(entry.shape, at::TensorOptions().dtype(entry.dtype->type));
      const uint64_t nbytes = entry.end - entry.begin;
      if (nbytes > 0) {
        in.seekg(static_cast<std::streamoff>(data_start + entry.begin));
        if (!in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(nbytes))) {
          return InvalidArgument(path + ": tensor '" + entry.name + "': cannot read its data");
        }
      }
      if (entry.dtype->type == at::kBool) {
        // Stored as bytes; anything but 0/1 is not a valid bool.
        const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
        for (uint64_t i = 0; i < nbytes; ++i) {
          if (bytes[i] > 1) {
            return InvalidArgument(path + ": tensor '" + entry.name + "': BOOL byte " +
                                   std::to_string(bytes[i]) + " is not 0 or 1");
          }
        }
      }
      tensors.emplace(entry.name, std::move(t));
    }
    return tensors;
  } catch (const std::exception& e) {
    return InvalidArgument(path + ": " + e.what());
  }
}

}  // namespace

StatusOr<TensorMap> ReadSafetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open file");
  return ReadSafetensorsStream(in, path);
}

StatusOr<TensorMap> ReadSafetensors(const std::string& path, const TensorFilter& keep) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open file");
  return ReadSafetensorsStream(in, path, keep);
}

StatusOr<TensorMap> ReadSafetensorsFromBytes(const void* data, size_t size,
                                             const std::string& name) {
  std::istringstream in(std::string(static_cast<const char*>(data), size), std::ios::binary);
  return ReadSafetensorsStream(in, name);
}

Status WriteSafetensors(const std::string& path, const TensorMap& tensors) {
  try {
    nlohmann::json header = nlohmann::json::object();
    std::vector<at::Tensor> blobs;
    uint64_t offset = 0;
    for (const auto& [name, tensor] : tensors) {
      if (!tensor.defined()) return InvalidArgument(path + ": tensor '" + name + "' is undefined");
      const DTypeInfo* info = FindDType(tensor.scalar_type());
      if (info == nullptr) {
        return InvalidArgument(path + ": tensor '" + name + "' has unsupported dtype " +
                               std::string(c10::toString(tensor.scalar_type())));
      }
      at::Tensor blob = tensor.detach().to(at::kCPU).contiguous();
      const uint64_t nbytes = static_cast<uint64_t>(blob.numel()) * info->bytes;
      header[name] = {{"dtype", info->name},
                      {"shape", blob.sizes().vec()},
                      {"data_offsets", {offset, offset + nbytes}}};
      offset += nbytes;
      blobs.push_back(std::move(blob));
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
    unsigned char len_bytes[8];
    uint64_t len = text.size();
    for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(len >> (8 * i));

    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) return InvalidArgument(path + ": cannot open for writing");
    out.write(reinterpret_cast<const char*>(len_bytes), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const at::Tensor& blob : blobs) {
      out.write(static_cast<const char*>(blob.data_ptr()),
                static_cast<std::streamsize>(blob.numel() * blob.element_size()));
    }
    out.close();
    if (!out) return Internal(path + ": write failed");
    return Status::Ok();
  } catch (const std::exception& e) {
    return Internal(path + ": " + e.what());
  }
}

}  // namespace mha
