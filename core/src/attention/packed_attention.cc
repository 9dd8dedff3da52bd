#include "attention/packed_attention.h"

#include <ATen/ATen.h>

#include <vector>

#include "attention/paged_kernel.h"
#include "attention/panel_gemm.h"

namespace mha::internal {
namespace {

// Buffers of up to this many bytes are kept per thread between passes (no allocation, no fresh
// pages); larger ones are allocated for the pass.
constexpr int64_t kKeptBufferBytes = int64_t{8} << 20;

// A [rows, cols] float32 tensor for this pass only: a view of `kept` (grown as needed) when small.
at::Tensor PassBuffer(at::Tensor* kept, int64_t rows, int64_t cols, const at::TensorOptions& opts) {
  const int64_t n = rows * cols;
  if (n * static_cast<int64_t>(sizeof(float)) > kKeptBufferBytes)
    return at::empty({rows, cols}, opts);
  if (!kept->defined() || kept->numel() < n) *kept = at::empty({n}, opts);
  return kept->narrow(0, 0, n).view({rows, cols});
}

// attended [B·T, E] times W^O plus its bias.
at::Tensor Project(const at::Tensor& attended, const PackedWeights& w) {
  const at::Tensor& bias = *w.out_bias;
  if (!w.out_panels) {
    return bias.defined() ? at::addmm(bias, attended, *w.out_t) : at::mm(attended, *w.out_t);
  }
  const int64_t n = attended.size(0), e = attended.size(1);
  at::Tensor output = at::empty({n, e}, attended.options());
  PanelGemm(attended.data_ptr<float>(), e, n, e, w.out_panels->data_ptr<float>(), e,
            bias.defined() ? bias.data_ptr<float>() : nullptr, output.data_ptr<float>());
  return output;
}

}  // namespace

at::Tensor PackedSelfAttention(const at::Tensor& query, int64_t heads, bool causal,
                               const PackedWeights& w) {
  const int64_t batch = query.size(0), t = query.size(1), e = query.size(2);
  const at::Tensor x = query.contiguous().view({batch * t, e});
  thread_local at::Tensor kept_qkv, kept_attended;
  // [B·T, 3E] without the bias: the kernel adds q's and v's (paged_kernel.h Unit), k's changes no
  // probability.
  at::Tensor qkv = PassBuffer(&kept_qkv, batch * t, 3 * e, x.options());
  if (w.in_panels) {
    PanelGemm(x.data_ptr<float>(), e, batch * t, e, w.in_panels->data_ptr<float>(), 3 * e, nullptr,
              qkv.data_ptr<float>());
  } else {
    at::mm_out(qkv, x, *w.in_t);
  }
  at::Tensor attended = PassBuffer(&kept_attended, batch * t, e, x.options());  // [B·T, E]
  const float* base = qkv.data_ptr<float>();
  const float* bias = w.in_bias->defined() ? w.in_bias->data_ptr<float>() : nullptr;
  Pages pages;
  pages.keys = base + e;  // batch row b's keys: the block at b * T rows of 3E floats
  pages.values = base + 2 * e;
  pages.block_tokens = t;
  pages.embed = e;
  pages.heads = heads;
  pages.head_dim = e / heads;
  pages.kv_embed = 3 * e;
  pages.group = 1;
  thread_local Scratch scratch;
  std::vector<int64_t> table(1);
  float* out = attended.data_ptr<float>();
  for (int64_t b = 0; b < batch; ++b) {
    table[0] = b;
    Unit u;
    u.table = &table;
    u.keys = u.tokens = t;
    u.causal = causal;
    u.q = base + b * t * 3 * e;
    u.q_stride = 3 * e;
    u.out = out + b * t * e;
    u.q_bias = bias;
    u.v_bias = bias ? bias + 2 * e : nullptr;
    u.kv_begin = 0;
    u.kv_end = heads;
    AttendUnit(u, pages, &scratch);
  }
  return Project(attended, w).view({batch, t, e});
}

}  // namespace mha::internal
