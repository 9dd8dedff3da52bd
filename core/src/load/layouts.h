// Private to mha_core: key-layout detection. Given the tensors of one attention layer (prefix
// already stripped), recognises which naming scheme they use and maps them onto MhaWeights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mha/status.h"
#include "mha/weights.h"

namespace mha::internal {

struct LayoutResult {
  std::string layout;  // "packed", "separate_proj", "fused_qkv", "wq_wk_wv", "q_k_v_proj"
  MhaWeights weights;
  int64_t embed_dim = 0;
  int64_t kdim = 0;
  int64_t vdim = 0;
  bool bias = false;
  bool add_bias_kv = false;
  std::vector<std::string> unused_keys;  // sorted
};

// `file` only names the source in error messages. Every shape is checked: a mismatch is
// INVALID_ARGUMENT "FILE: key 'out_proj.weight' has shape [16, 17], expected [16, 16] ...".
StatusOr<LayoutResult> ExtractLayout(const std::string& file, const TensorMap& tensors);

}  // namespace mha::internal
