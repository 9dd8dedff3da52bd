// Plain option structs for the attention core. No Torch types in the option surface, so
// callers (server flags, config.json) fill them without including LibTorch.
#pragma once

#include <cstdint>
#include <string>

#include "mha/status.h"

namespace mha {

enum class DType { kFloat32, kFloat16, kBFloat16 };

// Explicit attention on the CPU forms its scores in blocks of query rows (docs/core.md, "Blocked
// attention"): at most this many bytes of scores [B, H, rows, S'] per block. Each row's softmax is
// independent, so a block is the same computation on fewer rows. The default keeps a block and its
// softmax resident in a large L2 / L3 (measured: bench/core_forward_bench.cc BM_ForwardBlocks).
inline constexpr int64_t kDefaultAttentionBlockBytes = int64_t{4} << 20;

// The query rows per block that the core uses and the serving estimate charges (one function for
// both): t (one block, today's unblocked pass) when block_bytes <= 0 or the whole [B, H, t, keys]
// scores fit in block_bytes; else the most rows whose scores fit, at least 1. Saturating products.
int64_t AttentionBlockRows(int64_t batch, int64_t heads, int64_t t, int64_t keys,
                           int64_t element_bytes, int64_t block_bytes);

// "float32"/"fp32"/"float", "float16"/"fp16"/"half", "bfloat16"/"bf16".
StatusOr<DType> ParseDType(const std::string& name);
const char* DTypeName(DType dtype);  // canonical: "float32", "float16", "bfloat16"

// Shape and numeric options of one multi-head-attention layer, PyTorch's
// nn.MultiheadAttention(embed_dim, num_heads, bias, add_bias_kv, add_zero_attn, kdim, vdim).
struct MhaOptions {
  int64_t embed_dim = 0;
  int64_t num_heads = 0;
  int64_t kdim = 0;  // 0 = embed_dim
  int64_t vdim = 0;  // 0 = embed_dim
  bool bias = true;
  bool add_bias_kv = false;
  bool add_zero_attn = false;
  DType dtype = DType::kFloat32;
  std::string device = "auto";  // "cpu", "cuda", "cuda:N" or "auto" (CUDA when present)
  // On a CUDA device, small output-only passes replay captured CUDA graphs (mha/cuda_graphs.h).
  bool cuda_graphs = true;
  // Bytes of scores per block of query rows on the CPU (AttentionBlockRows); <= 0: one block.
  int64_t attention_block_bytes = kDefaultAttentionBlockBytes;

  int64_t head_dim() const { return num_heads > 0 ? embed_dim / num_heads : 0; }
  int64_t key_dim() const { return kdim > 0 ? kdim : embed_dim; }
  int64_t value_dim() const { return vdim > 0 ? vdim : embed_dim; }
  // kdim == vdim == embed_dim: PyTorch's _qkv_same_embed_dim (packed in_proj_weight).
  bool same_embed_dim() const { return key_dim() == embed_dim && value_dim() == embed_dim; }

  // Every inconsistency as INVALID_ARGUMENT with the numbers in the message.
  Status Validate() const;
};

}  // namespace mha
