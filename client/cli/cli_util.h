// Pieces the mha-client subcommands share: the request-shape flags, building a request from them
// (random inputs or a safetensors file), printing models and tensors, reporting errors.
#pragma once

#include <ATen/core/Tensor.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "client/bench/server_cpu.h"
#include "client/mha_client.h"
#include "mha/status.h"

namespace mha::client::cli {

struct ShapeFlags {
  std::string model, model_version;
  int64_t batch = 8, seq = 128, kv_seq = 0;  // kv_seq 0 = self-attention
  bool need_weights = false, per_head = false, causal = false;
  std::string output_dtype;
  uint64_t seed = 0;
  std::string input_file;
  // Head options (docs/heads.md); -1 = unset.
  std::string heads, head_mask, weights_dtype;  // "2,0"; "1,0,0.5,1"; float16 | bfloat16
  int64_t query_begin = -1, query_end = -1, top_k = 0;
  bool topk_int64 = false, head_stats = false;
};

void AddShapeFlags(CLI::App* cmd, ShapeFlags* f);

// -m/--model and --model-version, worded the same in every subcommand that takes them.
void AddModelFlags(CLI::App* cmd, std::string* model, std::string* model_version);

// --server-pid / --metrics-url: the server's CPU per request (or per message) and the efficiency
// against one core's matmul rate measured here (docs/performance.md, "How to read it").
void AddServerCpuFlags(CLI::App* cmd, ServerCpuSource* source);

// Prints "error: CODE: message" to stderr; returns 1.
int Fail(const Status& status);

// The request of `forward` and `bench`: inputs from --input, else random ones of the model's
// sizes (asked from the server).
StatusOr<v1::ForwardRequest> BuildRequest(AttentionClient& client, const ShapeFlags& f);

void PrintStats(const char* name, const at::Tensor& t);
void PrintModel(const v1::ModelInfo& m);

}  // namespace mha::client::cli
