// Private to mha_core: the inner loops of mha/paged_attention.h. One sequence's new tokens
// against its cached keys and values where they lie in the pool's pages, for any number of query
// heads per K/V head (grouped-query attention): block by block, each K/V head's rows of the block
// are met by every query head of its group while they sit in the L1 cache, so every cached byte
// comes from memory once per pass whatever H / KV. The dot products and the weighted sums run on
// 8-float vectors (AVX2 + FMA where the CPU has them, chosen at load time; SSE2 otherwise).
#pragma once

#include <cstdint>
#include <vector>

namespace mha::internal {

// The pool as raw pages: slot s of a block-ordered store is s * kv_embed floats in. Queries and
// outputs have `heads` heads (embed = heads * head_dim floats per token); the pages kv_heads, a
// divisor of heads: query head h reads K/V head h / group (group = heads / kv_heads).
struct Pages {
  const float* keys = nullptr;
  const float* values = nullptr;
  int64_t block_tokens = 0, embed = 0, heads = 0, head_dim = 0, kv_embed = 0, group = 1;
};

// One sequence of one item: its new tokens' queries against its cached keys.
struct Unit {
  const std::vector<int64_t>* table = nullptr;  // the row's block ids in order
  int64_t keys = 0;                             // S: tokens cached (the step's included)
  int64_t tokens = 0;                           // T: new tokens (queries)
  bool causal = false;                          // token t sees keys [0, S - T + 1 + t)
  const float* q = nullptr;                     // token t's query at q + t * q_stride
  int64_t q_stride = 0;
  float* out = nullptr;  // [T, E] contiguous: combine_heads rows
  // Projection biases [E] not yet added to q and to the values
  // (core/src/attention/packed_attention.cc), or null. None for the keys: q . (k + b) = q . k + q .
  // b adds the same to every score of a query row, which its softmax does not see.
  const float* q_bias = nullptr;
  const float* v_bias = nullptr;
  int64_t Visible(int64_t t) const { return causal ? keys - tokens + 1 + t : keys; }
};

// Per thread, grown to the largest unit seen and reused: scaled queries [T, E] and scores
// [T, H, S].
struct Scratch {
  std::vector<float> q, scores;
};

// softmax(q k^T / sqrt(D)) v of `u` over `pages`, written to u.out.
void AttendUnit(const Unit& u, const Pages& pages, Scratch* scratch);

}  // namespace mha::internal
