// Loading attention weights from the files people have: torch.save state dicts (OrderedDict as
// PyTorch writes them), safetensors, and TorchScript modules; key layouts detected by name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mha/load_options.h"
#include "mha/model_config.h"
#include "mha/options.h"
#include "mha/status.h"
#include "mha/weights.h"

namespace mha {

enum class WeightsFormat { kSafetensors, kTorchSave, kTorchScript };
const char* WeightsFormatName(WeightsFormat format);  // "safetensors", "torch_save", "torchscript"

// Detects the format from the file's bytes, never its name: a zip holding code/ or
// constants.pkl is TorchScript, one holding data.pkl is torch.save, a u64 LE header length then
// '{' is safetensors. Anything else: INVALID_ARGUMENT naming the file.
StatusOr<WeightsFormat> DetectWeightsFormat(const std::string& path);

// Raw readers: every tensor in the file, keyed as stored. Errors name the file.
StatusOr<TensorMap> ReadSafetensors(const std::string& path);
// Only the tensors whose names `keep` accepts (the whole header is still checked; the other
// tensors' bytes are not read): a model's attention out of a whole checkpoint.
using TensorFilter = std::function<bool(const std::string& name)>;
StatusOr<TensorMap> ReadSafetensors(const std::string& path, const TensorFilter& keep);
StatusOr<TensorMap> ReadTorchSave(const std::string& path);
// TorchScript: named parameters and buffers; `attributes` receives int/bool attributes of the
// root module that describe the layer (num_heads, embed_dim, kdim, vdim, add_zero_attn...).
StatusOr<TensorMap> ReadTorchScript(const std::string& path,
                                    std::map<std::string, int64_t>* attributes);

// The same readers over bytes already in memory (`name` stands in for the path in messages);
// the fuzz targets use these. ReadSafetensorsFromBytes copies the bytes once.
StatusOr<WeightsFormat> DetectWeightsFormatFromBytes(const void* data, size_t size,
                                                     const std::string& name);
StatusOr<TensorMap> ReadSafetensorsFromBytes(const void* data, size_t size,
                                             const std::string& name);
StatusOr<TensorMap> ReadTorchSaveFromBytes(const void* data, size_t size, const std::string& name);

// Writes tensors as safetensors (used by tools and tests; fp32/fp16/bf16/bool/int64).
Status WriteSafetensors(const std::string& path, const TensorMap& tensors);

struct LoadedWeights {
  MhaOptions options;  // embed_dim/kdim/vdim/bias/add_bias_kv from the shapes; the rest from config
  MhaWeights weights;  // fp32/fp16/bf16 as stored, on CPU
  WeightsFormat format = WeightsFormat::kSafetensors;
  std::string layout;  // "packed", "separate_proj", "fused_qkv", "wq_wk_wv", "q_k_v_proj"
  std::vector<std::string> unused_keys;  // keys under the prefix that the layout does not use
};

// Reads, detects format and layout, strips the prefix, reads config.json, infers shapes.
// Errors name the file, the key, the expected and the actual shape.
StatusOr<LoadedWeights> LoadWeights(const LoadOptions& options);

}  // namespace mha
