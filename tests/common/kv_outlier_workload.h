// The KV cache dtypes' hard cases (mha/kv_cache_dtype.h), shared by the accuracy benchmark
// (bench/kv_dtype_accuracy.cc) and the test that holds their bounds (kv_dtype_outliers_test.cc):
// sessions whose caches hold `cache` tokens with outlier channels (a few channels x20), then
// decode steps, on a one-layer model or a Llama layer with random weights N(0, 1/E) and no biases.
// Two sources of outliers:
//   kKeyChannels: the cached keys themselves have the outlier channels, as real LLM keys have (the
//     values do not); the steps' hidden states are plain N(0, 1).
//   kHiddenStates: the layer's input activations have them (the cache holds their projections, no
//     RoPE: the rotation keeps each pair's norm), the steps' hidden states too.
// Seeded: every dtype sees the same numbers.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "mha/decode.h"
#include "mha/kv_cache.h"
#include "mha/llama_stack.h"
#include "mha/llama_step.h"
#include "mha/llama_weights.h"
#include "mha/model.h"

namespace mha::testing {

enum class OutlierSource { kKeyChannels, kHiddenStates };

struct OutlierWorkload {
  OutlierSource source = OutlierSource::kKeyChannels;
  int64_t cache = 4096;  // tokens in each session's cache before the steps
  int64_t sessions = 2;  // one row each
  int64_t steps = 2;     // decode steps of one token
  int64_t outliers = 4;  // channels x factor, spread over the heads
  double factor = 20;
  uint64_t seed = 57;
};

// [n, e] ~ N(0, 1) with w.outliers channels (spread evenly, off the heads' first channel) x factor.
inline at::Tensor OutlierRows(int64_t n, int64_t e, const OutlierWorkload& w) {
  at::Tensor x = at::randn({n, e});
  for (int64_t i = 0; i < w.outliers; ++i) x.select(1, i * e / w.outliers + 5).mul_(w.factor);
  return x;
}

// What a session's cache holds before the steps, [1, n, kv] each, for a layer whose key and value
// projections are k_proj, v_proj [kv, E].
inline void CacheRows(const OutlierWorkload& w, const at::Tensor& k_proj, const at::Tensor& v_proj,
                      at::Tensor* k, at::Tensor* v) {
  const int64_t kv = k_proj.size(0), e = k_proj.size(1);
  if (w.source == OutlierSource::kKeyChannels) {
    *k = OutlierRows(w.cache, kv, w).unsqueeze(0);
    *v = at::randn({1, w.cache, kv});
    return;
  }
  const at::Tensor h = OutlierRows(w.cache, e, w);
  *k = at::matmul(h, k_proj.t()).unsqueeze(0);
  *v = at::matmul(h, v_proj.t()).unsqueeze(0);
}

// A step's hidden states [n, E].
inline at::Tensor StepRows(const OutlierWorkload& w, int64_t n, int64_t e) {
  return w.source == OutlierSource::kKeyChannels ? at::randn({n, e}) : OutlierRows(n, e, w);
}

// Norm-wise relative error, largest absolute error and cosine of `out` against `ref`.
struct OutputError {
  double rel = 0, max_abs = 0, cosine = 1;
};
inline OutputError CompareOutputs(const at::Tensor& out, const at::Tensor& ref) {
  const at::Tensor a = out.to(at::kDouble).flatten(), b = ref.to(at::kDouble).flatten();
  OutputError e;
  e.rel = ((a - b).norm() / b.norm()).item<double>();
  e.max_abs = (a - b).abs().max().item<double>();
  e.cosine = (a.dot(b) / (a.norm() * b.norm())).item<double>();
  return e;
}

// A one-layer model E x H, no biases, weights N(0, 1/E) from `seed`.
inline std::unique_ptr<MhaModel> RandomMhaModel(int64_t e, int64_t h, uint64_t seed) {
  at::manual_seed(seed);
  MhaOptions o;
  o.embed_dim = e, o.num_heads = h, o.bias = false, o.device = "cpu";
  MhaWeights w;
  const double scale = 1.0 / std::sqrt(static_cast<double>(e));
  for (at::Tensor* t : {&w.q_weight, &w.k_weight, &w.v_weight, &w.out_weight}) {
    *t = at::randn({e, e}) * scale;
  }
  auto model = MhaModel::Create(o, w);
  return model.ok() ? std::move(model.value()) : nullptr;
}

// A Llama layer E, H, KV (D = E / H), no biases, weights N(0, 1/E) from `seed`, and its key and
// value projections.
struct RandomLlama {
  std::shared_ptr<LlamaAttentionStack> stack;
  at::Tensor k_proj, v_proj;
};
inline RandomLlama RandomLlamaStack(int64_t e, int64_t h, int64_t kv, uint64_t seed) {
  at::manual_seed(seed);
  LlamaConfig c;
  c.hidden_size = e, c.num_attention_heads = h, c.num_key_value_heads = kv, c.head_dim = e / h;
  c.num_hidden_layers = 1, c.max_position_embeddings = 1 << 16;
  TensorMap tensors;
  const double scale = 1.0 / std::sqrt(static_cast<double>(e));
  tensors[LlamaTensorName(0, "q_proj", "weight")] = at::randn({c.q_dim(), e}) * scale;
  tensors[LlamaTensorName(0, "k_proj", "weight")] = at::randn({c.kv_dim(), e}) * scale;
  tensors[LlamaTensorName(0, "v_proj", "weight")] = at::randn({c.kv_dim(), e}) * scale;
  tensors[LlamaTensorName(0, "o_proj", "weight")] = at::randn({e, c.q_dim()}) * scale;
  LlamaStackOptions options;
  options.device = "cpu";
  auto stack = LlamaAttentionStack::Create(options, c, tensors);
  return {stack.ok() ? *stack : nullptr, tensors[LlamaTensorName(0, "k_proj", "weight")],
          tensors[LlamaTensorName(0, "v_proj", "weight")]};
}

// Every session's caches filled with w.cache tokens (keys with outlier channels, plain values),
// then w.steps merged decode steps (paged on the CPU): the outputs [steps * sessions, E] in order.
inline at::Tensor MhaOutlierOutputs(const MhaModel& model, KvCacheDtype dtype,
                                    const OutlierWorkload& w) {
  const int64_t e = model.options().embed_dim;
  at::manual_seed(w.seed);
  auto pool = KvBlockPool::Create(
      KvPoolOptions{w.sessions * (w.cache + w.steps + 16) * 2 * e * 4, 16, dtype}, model);
  TORCH_CHECK(pool.ok(), pool.status().ToString());
  std::vector<std::unique_ptr<KvCache>> caches;
  for (int64_t i = 0; i < w.sessions; ++i) {
    caches.push_back(std::make_unique<KvCache>(*pool, 1));
    TORCH_CHECK(caches.back()->Reserve(w.cache).ok());
    at::Tensor k, v;
    CacheRows(w, model.weights().k_weight, model.weights().v_weight, &k, &v);
    caches.back()->Append(k, v);
  }
  std::vector<at::Tensor> outs;
  for (int64_t s = 0; s < w.steps; ++s) {
    std::vector<StepInputs> in(static_cast<size_t>(w.sessions));
    std::vector<ForwardOutputs> out(static_cast<size_t>(w.sessions));
    std::vector<StepItem> items;
    for (int64_t i = 0; i < w.sessions; ++i) {
      in[i].query = StepRows(w, 1, e).view({1, 1, e});
      TORCH_CHECK(caches[i]->Reserve(1).ok());
      items.push_back(StepItem{caches[i].get(), false, &in[i], &out[i]});
    }
    const Status status = DecodeSteps(model, items);
    TORCH_CHECK(status.ok(), status.ToString());
    for (const ForwardOutputs& o : out) outs.push_back(o.output.view({1, e}));
  }
  return at::cat(outs, 0);
}

// The same for a Llama layer: each session one layer cache, one LlamaLayerStep per step.
inline at::Tensor LlamaOutlierOutputs(const RandomLlama& llama, KvCacheDtype dtype,
                                      const OutlierWorkload& w) {
  const LlamaAttentionStack& stack = *llama.stack;
  const LlamaConfig& c = stack.config();
  at::manual_seed(w.seed);
  auto pool = stack.CreateKvPool(
      KvPoolOptions{w.sessions * (w.cache + w.steps + 16) * 2 * c.kv_dim() * 4, 16, dtype});
  TORCH_CHECK(pool.ok(), pool.status().ToString());
  std::vector<std::unique_ptr<KvCache>> caches;
  for (int64_t i = 0; i < w.sessions; ++i) {
    caches.push_back(std::make_unique<KvCache>(*pool, 1));
    TORCH_CHECK(caches.back()->Reserve(w.cache).ok());
    at::Tensor k, v;
    CacheRows(w, llama.k_proj, llama.v_proj, &k, &v);
    caches.back()->Append(k, v);
  }
  std::vector<at::Tensor> outs;
  for (int64_t s = 0; s < w.steps; ++s) {
    std::vector<at::Tensor> out(static_cast<size_t>(w.sessions));
    std::vector<LlamaStepItem> items;
    for (int64_t i = 0; i < w.sessions; ++i) {
      TORCH_CHECK(caches[i]->Reserve(1).ok());
      items.push_back(LlamaStepItem{caches[i].get(), StepRows(w, 1, c.hidden_size), &out[i]});
    }
    const Status status = LlamaLayerStep(stack, 0, items);
    TORCH_CHECK(status.ok(), status.ToString());
    outs.insert(outs.end(), out.begin(), out.end());
  }
  return at::cat(outs, 0);
}

}  // namespace mha::testing
