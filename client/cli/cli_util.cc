#include "client/cli/cli_util.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstdio>
#include <sstream>

#include "client/tensor_client.h"
#include "mha/loader.h"
#include "mha/tensor_util.h"
#include "proto/wire/tensor_header.h"

namespace mha::client::cli {
namespace {

std::string StateName(int state) { return v1::ModelState_Name(state); }

}  // namespace

void AddModelFlags(CLI::App* cmd, std::string* model, std::string* model_version) {
  cmd->add_option("-m,--model", *model, "Model name (default: the server's default model)");
  cmd->add_option("--model-version", *model_version,
                  "Model version (default: the newest READY one)");
}

void AddServerCpuFlags(CLI::App* cmd, ServerCpuSource* source) {
  cmd->add_option("--server-pid", source->pid,
                  "Report the server's CPU per request from /proc/PID/stat (a server on this "
                  "machine) and the efficiency against one core's matmul rate measured here");
  cmd->add_option("--metrics-url", source->metrics_url,
                  "Without --server-pid: the same from the server's process_cpu_seconds_total, "
                  "e.g. http://127.0.0.1:8502/metrics");
}

void AddShapeFlags(CLI::App* cmd, ShapeFlags* f) {
  AddModelFlags(cmd, &f->model, &f->model_version);
  cmd->add_option("-b,--batch", f->batch, "Batch size B")->capture_default_str();
  cmd->add_option("-t,--seq", f->seq, "Query length T")->capture_default_str();
  cmd->add_option("-s,--kv-seq", f->kv_seq, "Key/value length S; 0 = self-attention")
      ->capture_default_str();
  cmd->add_flag("-w,--need-weights", f->need_weights, "Ask for attention weights");
  cmd->add_flag("--per-head", f->per_head,
                "Per-head weights [B,H,T,S] (average_attn_weights=false)");
  cmd->add_flag("--causal", f->causal, "is_causal");
  cmd->add_option("--output-dtype", f->output_dtype, "float32, float16 or bfloat16");
  cmd->add_option("--seed", f->seed, "Seed of the random inputs")->capture_default_str();
  cmd->add_option("-i,--input", f->input_file,
                  "Inputs from a safetensors file (query, key, value, key_padding_mask, attn_mask) "
                  "instead of random ones");
  cmd->add_option("--heads", f->heads, "weights_heads: per-head weights of these heads, \"2,0\"");
  cmd->add_option("--query-begin", f->query_begin, "weights_query_begin: first query row");
  cmd->add_option("--query-end", f->query_end, "weights_query_end: one past the last row");
  cmd->add_option("--top-k", f->top_k, "weights_top_k: the k largest weights per row");
  cmd->add_flag("--topk-int64", f->topk_int64, "Top-k indices as INT64 (default INT32)");
  cmd->add_option("--weights-dtype", f->weights_dtype, "weights_dtype: float16 or bfloat16");
  cmd->add_flag("--head-stats", f->head_stats, "head_stats: entropy and max weight [B,H,T]");
  cmd->add_option("--head-mask", f->head_mask, "head_mask [H], e.g. \"1,0,1,1\" (0 drops a head)");
}

namespace {

// "2,0" -> {2, 0}; INVALID_ARGUMENT naming the flag.
template <typename T>
StatusOr<std::vector<T>> ParseList(const std::string& text, const char* flag) {
  std::vector<T> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::stringstream one(item);
    T v{};
    if (!(one >> v) || !(one >> std::ws).eof()) {
      return InvalidArgument(std::string(flag) + ": '" + text + "' is not a comma-separated list");
    }
    out.push_back(v);
  }
  return out;
}

Status SetHeadOptions(const ShapeFlags& f, ForwardInputs* in) {
  auto heads = ParseList<int64_t>(f.heads, "--heads");
  if (!heads.ok()) return heads.status();
  WeightsSelection& s = in->weights_selection;
  s.heads = *heads;
  if (!s.heads.empty()) in->average_attn_weights = false;  // those heads' own weights
  if (f.query_begin >= 0) s.query_begin = f.query_begin;
  if (f.query_end >= 0) s.query_end = f.query_end;
  s.top_k = f.top_k;
  s.topk_indices_int64 = f.topk_int64;
  if (!f.weights_dtype.empty()) {
    auto dtype = ParseDType(f.weights_dtype);
    if (!dtype.ok()) return dtype.status();
    in->weights_dtype = ToScalarType(*dtype);
  }
  in->head_stats = f.head_stats;
  if (!f.head_mask.empty()) {
    auto mask = ParseList<float>(f.head_mask, "--head-mask");
    if (!mask.ok()) return mask.status();
    in->head_mask = at::tensor(*mask, at::kFloat);
  }
  return Status::Ok();
}

}  // namespace

int Fail(const Status& status) {
  std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
  return 1;
}

// Builds the request of `forward` and `bench`.
StatusOr<v1::ForwardRequest> BuildRequest(AttentionClient& client, const ShapeFlags& f) {
  mha::ForwardInputs in;
  if (!f.input_file.empty()) {
    auto tensors = mha::ReadSafetensors(f.input_file);
    if (!tensors.ok()) return tensors.status();
    auto get = [&](const char* key) {
      auto it = tensors->find(key);
      return it == tensors->end() ? at::Tensor() : it->second;
    };
    in.query = get("query");
    in.key = get("key");
    in.value = get("value");
    in.key_padding_mask = get("key_padding_mask");
    in.attn_mask = get("attn_mask");
    if (!in.query.defined()) return mha::InvalidArgument(f.input_file + " has no 'query' tensor");
  } else {
    auto info = client.GetModel(f.model);
    if (!info.ok()) return info.status();
    auto gen = at::make_generator<at::CPUGeneratorImpl>(f.seed);
    in.query = at::randn({f.batch, f.seq, info->embed_dim()}, gen);
    if (f.kv_seq > 0) {
      in.key = at::randn({f.batch, f.kv_seq, info->kdim()}, gen);
      in.value = at::randn({f.batch, f.kv_seq, info->vdim()}, gen);
    }
  }
  in.is_causal = f.causal;
  in.need_weights = f.need_weights;
  in.average_attn_weights = !f.per_head;
  MHA_RETURN_IF_ERROR(SetHeadOptions(f, &in));
  mha::client::ForwardOptions options;
  options.model = f.model;
  options.model_version = f.model_version;
  if (!f.output_dtype.empty()) {
    auto dtype = mha::ParseDType(f.output_dtype);
    if (!dtype.ok()) return dtype.status();
    options.output_dtype = mha::codec::ToProtoDType(*dtype);
  }
  return mha::client::MakeForwardRequest(in, options);
}

void PrintStats(const char* name, const at::Tensor& t) {
  const at::Tensor f = t.to(at::kDouble);
  const at::Tensor finite = f.masked_select(at::isfinite(f));
  std::ostringstream shape;
  shape << t.sizes();
  std::printf("%s: shape %s dtype %s  mean %.6g std %.6g min %.6g max %.6g  non-finite %lld\n",
              name, shape.str().c_str(), c10::toString(t.scalar_type()),
              finite.numel() ? finite.mean().item<double>() : 0.0,
              finite.numel() > 1 ? finite.std().item<double>() : 0.0,
              finite.numel() ? finite.min().item<double>() : 0.0,
              finite.numel() ? finite.max().item<double>() : 0.0,
              static_cast<long long>(f.numel() - finite.numel()));
}

void PrintModel(const v1::ModelInfo& m) {
  std::printf("%s%s v%s %s", m.name().c_str(), m.is_default() ? " (default)" : "",
              m.version().c_str(), StateName(m.state()).c_str());
  if (m.state() == mha::v1::FAILED || m.embed_dim() == 0) {  // no model: LOADING, FAILED
    std::printf("%s%s\n", m.error().empty() ? "" : ": ", m.error().c_str());
    return;
  }
  std::printf(
      ": E=%lld H=%lld head_dim=%lld kdim=%lld vdim=%lld bias=%d add_bias_kv=%d "
      "add_zero_attn=%d dtype=%s compute=%s device=%s format=%s layout=%s params=%lld\n"
      "    kv_cache=%s kv_bytes_per_token=%lld source %s\n",
      (long long)m.embed_dim(), (long long)m.num_heads(), (long long)m.head_dim(),
      (long long)m.kdim(), (long long)m.vdim(), m.bias(), m.add_bias_kv(), m.add_zero_attn(),
      mha::codec::DataTypeName(m.dtype()).c_str(),
      mha::codec::DataTypeName(m.compute_dtype()).c_str(), m.device().c_str(), m.format().c_str(),
      m.layout().c_str(), (long long)m.parameter_count(), m.kv_cache_dtype().c_str(),
      (long long)m.kv_bytes_per_token(), m.source().c_str());
  if (m.architecture() == "llama") {
    std::printf(
        "    llama stack: layers=%lld kv_heads=%lld max_positions=%lld rope_theta=%g "
        "kv_bytes_per_token_per_layer=%lld\n",
        (long long)m.num_layers(), (long long)m.num_key_value_heads(), (long long)m.max_positions(),
        m.rope_theta(), (long long)m.kv_bytes_per_token_per_layer());
  }
  if (!m.error().empty()) std::printf("    %s\n", m.error().c_str());
}

}  // namespace mha::client::cli
