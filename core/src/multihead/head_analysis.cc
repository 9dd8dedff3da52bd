#include "mha/head_analysis.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "mha/weights.h"

namespace mha {
namespace {

std::vector<double> ToVector(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kCPU, at::kDouble).contiguous();
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

// The reference analysis's effective_rank (OutputProjectionAnalyzer): exp(-sum p ln(p + 1e-10))
// over the singular values normalised to sum 1, those <= 1e-10 left out.
double effective_rank(const at::Tensor& matrix) {
  at::Tensor s = at::linalg_svdvals(matrix);
  s = s / s.sum();
  s = s.masked_select(s > 1e-10);
  return std::exp(-(s * at::log(s + 1e-10)).sum().item<double>());
}

// `whole` [R, C] split into `blocks` [H, R/H, C].
ProjectionAnalysis analyze_blocks(const at::Tensor& whole, const at::Tensor& blocks) {
  const int64_t heads = blocks.size(0);
  const at::Tensor flat = blocks.reshape({heads, -1});
  ProjectionAnalysis a;
  const at::Tensor norms = flat.norm(2, {1});
  a.head_importance = ToVector(norms / norms.sum());
  const at::Tensor centered = flat - flat.mean({1}, /*keepdim=*/true);
  const at::Tensor cn = centered.norm(2, {1});
  a.head_correlation =
      ToVector(centered.mm(centered.t()) / (cn.unsqueeze(1) * cn.unsqueeze(0) + 1e-8));
  a.effective_rank = effective_rank(whole);
  a.max_rank = std::min(whole.size(0), whole.size(1));
  for (int64_t h = 0; h < heads; ++h) a.head_effective_rank.push_back(effective_rank(blocks[h]));
  a.head_max_rank = std::min(blocks.size(1), blocks.size(2));
  return a;
}

// PyTorch's [E, E_in] projection weight as H row blocks [d, E_in].
ProjectionAnalysis analyze_input_projection(const at::Tensor& weight, int64_t heads) {
  const at::Tensor w = weight.to(at::kCPU, at::kDouble);
  return analyze_blocks(w, w.reshape({heads, w.size(0) / heads, w.size(1)}));
}

}  // namespace

StatusOr<HeadAnalysis> AnalyzeHeads(const MhaOptions& o, const MhaWeights& weights) {
  try {
    c10::InferenceMode guard;
    HeadAnalysis r;
    r.num_heads = o.num_heads;
    r.head_dim = o.head_dim();
    r.embed_dim = o.embed_dim;
    // W^O as the seed writes it: concat(heads) [.., H*d_v] @ W^O [H*d_v, E] = out_weight^T.
    const at::Tensor w_o = weights.out_weight.to(at::kCPU, at::kDouble).t().contiguous();
    const at::Tensor blocks = w_o.view({o.num_heads, o.head_dim(), o.embed_dim});  // W^O_i
    r.output = analyze_blocks(w_o, blocks);
    const at::Tensor columns = blocks.norm(2, {1}).t();  // [E, H]: ||W^O_i[:, out]||
    r.output_dim_contribution = ToVector(columns / (columns.sum({1}, true) + 1e-8));
    r.query = analyze_input_projection(weights.q_weight, o.num_heads);
    r.key = analyze_input_projection(weights.k_weight, o.num_heads);
    r.value = analyze_input_projection(weights.v_weight, o.num_heads);
    return r;
  } catch (const c10::Error& e) {
    return Internal(std::string("analysing the heads failed: ") + e.what_without_backtrace());
  }
}

}  // namespace mha
