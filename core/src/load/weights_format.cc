// Weights-file format detection from the bytes, never the file name (Triton users name
// TorchScript files model.pt, and people rename safetensors files).
#include <caffe2/serialize/inline_container.h>

#include <cstring>
#include <fstream>
#include <memory>

#include "load/memory_adapter.h"
#include "mha/loader.h"

namespace mha {

const char* WeightsFormatName(WeightsFormat format) {
  switch (format) {
    case WeightsFormat::kSafetensors:
      return "safetensors";
    case WeightsFormat::kTorchSave:
      return "torch_save";
    case WeightsFormat::kTorchScript:
      return "torchscript";
  }
  return "unknown";
}

namespace {

// `head`: the first `got` (<= 9) bytes of `size`; `open_zip` makes a zip reader over all of them.
template <typename OpenZip>
StatusOr<WeightsFormat> Detect(const std::string& path, const unsigned char* head, size_t got,
                               uint64_t file_size, OpenZip open_zip) {
  if (got >= 4 && head[0] == 'P' && head[1] == 'K' && head[2] == 3 && head[3] == 4) {
    try {
      caffe2::serialize::PyTorchStreamReader reader = open_zip();
      // TorchScript archives hold data.pkl too, so look for their code first.
      if (reader.hasRecord("constants.pkl")) return WeightsFormat::kTorchScript;
      for (const std::string& record : reader.getAllRecords()) {
        if (record.rfind("code/", 0) == 0) return WeightsFormat::kTorchScript;
      }
      if (reader.hasRecord("data.pkl")) return WeightsFormat::kTorchSave;
      return InvalidArgument(path +
                             ": zip archive holds neither data.pkl (torch.save) nor "
                             "code/ or constants.pkl (TorchScript)");
    } catch (const c10::Error& e) {
      return InvalidArgument(
          path + ": zip archive is not a readable PyTorch archive: " + e.what_without_backtrace());
    } catch (const std::exception& e) {
      return InvalidArgument(path + ": zip archive is not a readable PyTorch archive: " + e.what());
    }
  }
  std::string why = "too short for safetensors";
  if (got == 9) {
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | head[i];
    if (header_len >= 2 && header_len <= file_size - 8 && head[8] == '{') {
      return WeightsFormat::kSafetensors;
    }
    why = header_len > file_size - 8 ? "as safetensors, its header length " +
                                           std::to_string(header_len) + " is larger than the file"
                                     : "as safetensors, its header does not start with '{'";
  }
  if (got >= 2 && head[0] == 0x80 && head[1] <= 5) {
    return InvalidArgument(path +
                           ": legacy (pre-1.6, non-zip) torch.save files are not supported; "
                           "re-save with torch.save's defaults or as safetensors");
  }
  return InvalidArgument(path + ": unrecognised weights format (" + std::to_string(file_size) +
                         " bytes; " + why + "): expected safetensors, a torch.save zip archive " +
                         "or a TorchScript archive");
}

}  // namespace

StatusOr<WeightsFormat> DetectWeightsFormat(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open weights file");
  in.seekg(0, std::ios::end);
  const auto file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  unsigned char head[9] = {};
  in.read(reinterpret_cast<char*>(head), sizeof(head));
  const auto got = static_cast<size_t>(in.gcount());
  return Detect(path, head, got, file_size,
                [&] { return caffe2::serialize::PyTorchStreamReader(path); });
}

StatusOr<WeightsFormat> DetectWeightsFormatFromBytes(const void* data, size_t size,
                                                     const std::string& name) {
  unsigned char head[9] = {};
  const size_t got = size < sizeof(head) ? size : sizeof(head);
  if (got > 0) std::memcpy(head, data, got);
  return Detect(name, head, got, size, [&] {
    return caffe2::serialize::PyTorchStreamReader(
        std::make_shared<internal::BoundedMemoryAdapter>(data, size));
  });
}

}  // namespace mha
