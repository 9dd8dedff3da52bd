// What a model's weights say about its heads, without any input: the W^O analysis
// (OutputProjectionAnalyzer: W^O as [H*d_v, E], split into H row blocks W^O_i of [d_v, E]) and the
// same per-head block analysis of W^Q, W^K and W^V (PyTorch's [E, E_in] weights, split into H row
// blocks of [d, E_in]: the features of one head). Computed in float64 on the CPU, epsilons as in
// the seed, so that scripts/fixtures/head_reference.py (the seed's class) agrees within 1e-5.
#pragma once

#include <cstdint>
#include <vector>

#include "mha/options.h"
#include "mha/status.h"

namespace mha {

struct MhaWeights;  // mha/weights.h (LibTorch): this header stays torch-free

struct ProjectionAnalysis {
  std::vector<double> head_importance;      // [H]: Frobenius norm of each block, sum 1
  std::vector<double> head_correlation;     // [H, H] row-major: Pearson, flattened blocks
  double effective_rank = 0;                // exp(entropy of normalised singular values)
  int64_t max_rank = 0;                     // min(rows, columns) of the whole matrix
  std::vector<double> head_effective_rank;  // [H]
  int64_t head_max_rank = 0;                // min(rows, columns) of a block
};

struct HeadAnalysis {
  int64_t num_heads = 0, head_dim = 0, embed_dim = 0;
  ProjectionAnalysis output;  // W^O
  ProjectionAnalysis query, key, value;
  // [E, H] row-major: per output dimension, each head's column norm in W^O, rows sum to 1.
  std::vector<double> output_dim_contribution;
};

// INTERNAL if LibTorch fails (c10::Error caught); never throws.
StatusOr<HeadAnalysis> AnalyzeHeads(const MhaOptions& options, const MhaWeights& weights);

}  // namespace mha
