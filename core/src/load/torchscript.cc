// TorchScript modules (torch.jit.script / torch.jit.trace, then .save): the only file that includes
// <torch/script.h>. Parameters and buffers come out under their dotted names; the root module's
// int/bool attributes that describe an attention layer come out as `attributes`.
#include <torch/script.h>

#include "mha/loader.h"

namespace mha {
namespace {

// nn.MultiheadAttention's attribute names (kdim/vdim are ints, the rest as named).
constexpr const char* kAttributeNames[] = {
    "num_heads",   "embed_dim",           "kdim",    "vdim", "add_zero_attn",
    "batch_first", "_qkv_same_embed_dim", "head_dim"};

}  // namespace

StatusOr<TensorMap> ReadTorchScript(const std::string& path,
                                    std::map<std::string, int64_t>* attributes) {
  try {
    torch::jit::Module module = torch::jit::load(path, c10::Device(c10::kCPU));
    TensorMap tensors;
    for (const auto& param : module.named_parameters(/*recurse=*/true)) {
      tensors[param.name] = param.value.detach();
    }
    for (const auto& buffer : module.named_buffers(/*recurse=*/true)) {
      tensors[buffer.name] = buffer.value.detach();
    }
    if (attributes != nullptr) {
      for (const char* name : kAttributeNames) {
        if (!module.hasattr(name)) continue;
        const c10::IValue value = module.attr(name);
        if (value.isInt()) {
          (*attributes)[name] = value.toInt();
        } else if (value.isBool()) {
          (*attributes)[name] = value.toBool() ? 1 : 0;
        }
      }
    }
    if (tensors.empty()) return InvalidArgument(path + ": TorchScript module has no tensors");
    return tensors;
  } catch (const c10::Error& e) {
    return InvalidArgument(path +
                           ": cannot load TorchScript module: " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return InvalidArgument(path + ": cannot load TorchScript module: " + e.what());
  }
}

}  // namespace mha
