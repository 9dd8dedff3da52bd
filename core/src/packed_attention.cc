#include "packed_attention.h"

#include <ATen/ATen.h>

#include <vector>

#include "paged_kernel.h"

namespace mha::internal {
namespace {

// x [N, K] times w [K, M] (+ bias [M]): [N, M].
at::Tensor Project(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  return bias.defined() ? at::addmm(bias, x, w) : at::mm(x, w);
}

}  // namespace

at::Tensor PackedSelfAttention(const at::Tensor& query, int64_t heads, bool causal,
                               const PackedWeights& w) {
  const int64_t batch = query.size(0), t = query.size(1), e = query.size(2);
  const at::Tensor x = query.contiguous().view({batch * t, e});
  const at::Tensor qkv = Project(x, *w.in_t, *w.in_bias).contiguous();  // [B·T, 3E]
  at::Tensor attended = at::empty({batch * t, e}, x.options());         // [B·T, E]
  const float* base = qkv.data_ptr<float>();
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
    AttendUnit(u, pages, &scratch);
  }
  return Project(attended, *w.out_t, *w.out_bias).view({batch, t, e});
}

}  // namespace mha::internal
