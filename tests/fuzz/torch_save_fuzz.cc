// torch.save bytes. A zip ("PK\3\4...") goes to ReadTorchSave whole; anything else is taken as
// the archive's data.pkl and run over an archive in which every storage record data/<key> is
// 64 KiB of zeros. The pickle path matters most: zip records carry CRC-32s, so mutated zips
// rarely get as far as the pickle interpreter.
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <tuple>

#include "fuzz_common.h"
#include "load/layouts.h"
#include "load/torch_pickle.h"
#include "mha/loader.h"

namespace {

constexpr size_t kRecordBytes = 64 << 10;
alignas(64) const unsigned char kZeros[kRecordBytes] = {};

void Layout(const mha::TensorMap& tensors) {
  try {  // LoadWeights catches exceptions the same way
    (void)mha::internal::ExtractLayout("fuzz.pt", tensors);
  } catch (const std::exception&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= 4 && std::memcmp(data, "PK\3\4", 4) == 0) {
    auto tensors = mha::ReadTorchSaveFromBytes(data, size, "fuzz.pt");
    if (tensors.ok()) Layout(tensors.value());
    return 0;
  }
  mha::TensorMap tensors;
  try {  // ReadTorchSave turns these into INVALID_ARGUMENT
    tensors = mha::internal::TensorsFromPickle(
        reinterpret_cast<const char*>(data), size,
        [](const std::string& record) -> std::optional<std::tuple<at::DataPtr, size_t>> {
          if (record.rfind("data/", 0) != 0) return std::nullopt;
          return std::make_tuple(
              at::DataPtr(const_cast<unsigned char*>(kZeros), at::Device(at::kCPU)), kRecordBytes);
        });
  } catch (const std::exception&) {
    return 0;
  }
  Layout(tensors);
  return 0;
}
