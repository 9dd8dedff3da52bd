// The Open Inference Protocol side of the head options (docs/heads.md): request parameters named
// like mha.v1's ForwardRequest fields, and the outputs named like ForwardResponse's.
#include <algorithm>
#include <array>
#include <charconv>
#include <utility>

#include "mha/text.h"
#include "proto/wire/dtype_table.h"
#include "proto/wire/tensor_codec.h"
#include "server/frontends/oip/infer_request.h"

namespace mha::serve::oip {
namespace {

constexpr char kWeightsHeads[] = "weights_heads";
constexpr char kQueryBegin[] = "weights_query_begin";
constexpr char kQueryEnd[] = "weights_query_end";
constexpr char kTopK[] = "weights_top_k";
constexpr char kWeightsDtype[] = "weights_dtype";
constexpr char kIndicesDtype[] = "weights_topk_indices_dtype";

Status Wrong(const char* name, const char* kind) {
  return InvalidArgument(std::string("parameters.") + name + ": must be " + kind);
}

StatusOr<std::optional<int64_t>> Int64Parameter(const inference::ModelInferRequest& r,
                                                const char* name) {
  const inference::InferParameter* p = FindParameter(r, name);
  if (p == nullptr) return std::optional<int64_t>();
  if (p->parameter_choice_case() != inference::InferParameter::kInt64Param) {
    return Wrong(name, "an int64_param");
  }
  return std::optional<int64_t>(p->int64_param());
}

// "2,0" (or an int64_param for one head) -> {2, 0}.
StatusOr<std::vector<int64_t>> HeadList(const inference::ModelInferRequest& r) {
  const inference::InferParameter* p = FindParameter(r, kWeightsHeads);
  if (p == nullptr) return std::vector<int64_t>();
  if (p->parameter_choice_case() == inference::InferParameter::kInt64Param) {
    return std::vector<int64_t>{p->int64_param()};
  }
  if (p->parameter_choice_case() != inference::InferParameter::kStringParam) {
    return Wrong(kWeightsHeads, "a string_param of comma-separated head indices (\"2,0\")");
  }
  std::vector<int64_t> heads;
  const std::string& text = p->string_param();
  for (size_t begin = 0; begin <= text.size();) {
    size_t end = std::min(text.find(',', begin), text.size());
    while (begin < end && text[begin] == ' ') ++begin;
    while (end > begin && text[end - 1] == ' ') --end;
    int64_t head = 0;
    const auto [ptr, ec] = std::from_chars(text.data() + begin, text.data() + end, head);
    if (ec != std::errc() || ptr != text.data() + end || begin == end) {
      return InvalidArgument("parameters.weights_heads: '" + Abbreviate(text) +
                             "' is not a comma-separated list of head indices (\"2,0\")");
    }
    heads.push_back(head);
    begin = text.find(',', begin);
    begin = begin == std::string::npos ? text.size() + 1 : begin + 1;
  }
  return heads;
}

// A string_param naming one of `allowed` datatypes; nullopt when absent.
StatusOr<std::optional<std::string>> DatatypeParameter(const inference::ModelInferRequest& r,
                                                       const char* name,
                                                       std::vector<std::string> allowed) {
  const inference::InferParameter* p = FindParameter(r, name);
  if (p == nullptr) return std::optional<std::string>();
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  if (p->parameter_choice_case() != inference::InferParameter::kStringParam ||
      std::find(allowed.begin(), allowed.end(), p->string_param()) == allowed.end()) {
    return InvalidArgument(std::string("parameters.") + name + ": must be a string_param, one of " +
                           list);
  }
  return std::optional<std::string>(p->string_param());
}

}  // namespace

Status DecodeHeadParameters(const inference::ModelInferRequest& r, bool average_sent,
                            HostInputs* in) {
  WeightsSelection& s = in->weights_selection;
  auto heads = HeadList(r);
  if (!heads.ok()) return heads.status();
  s.heads = std::move(heads.value());
  if (!s.heads.empty() && !average_sent) in->average_attn_weights = false;
  auto begin = Int64Parameter(r, kQueryBegin);
  if (!begin.ok()) return begin.status();
  auto end = Int64Parameter(r, kQueryEnd);
  if (!end.ok()) return end.status();
  auto top_k = Int64Parameter(r, kTopK);
  if (!top_k.ok()) return top_k.status();
  s.query_begin = *begin;
  s.query_end = *end;
  s.top_k = top_k->value_or(0);
  if (s.top_k < 0) {
    return InvalidArgument("weights_top_k: " + std::to_string(s.top_k) +
                           " must be >= 1 (0 = dense weights)");
  }
  auto dtype = DatatypeParameter(r, kWeightsDtype, {"FP32", "FP16", "BF16"});
  if (!dtype.ok()) return dtype.status();
  if (*dtype) {
    in->weights_dtype = codec::FindOipDType(**dtype)->element;  // one of the allowed
  }
  auto indices = DatatypeParameter(r, kIndicesDtype, {"INT32", "INT64"});
  if (!indices.ok()) return indices.status();
  s.topk_indices_int64 = indices->value_or("INT32") == "INT64";
  return Status::Ok();
}

const char* OutputName(OutputTensor output) {
  switch (output) {
    case OutputTensor::kOutput:
      return kOutput;
    case OutputTensor::kAttnWeights:
      return kAttnWeights;
    case OutputTensor::kTopkValues:
      return kTopkValues;
    case OutputTensor::kTopkIndices:
      return kTopkIndices;
    case OutputTensor::kHeadEntropy:
      return kHeadEntropy;
    case OutputTensor::kHeadMaxWeight:
      break;
  }
  return kHeadMaxWeight;
}

namespace {

constexpr std::array<OutputTensor, 6> kAllOutputs = {
    OutputTensor::kOutput,      OutputTensor::kAttnWeights, OutputTensor::kTopkValues,
    OutputTensor::kTopkIndices, OutputTensor::kHeadEntropy, OutputTensor::kHeadMaxWeight};

StatusOr<OutputTensor> ParseOutput(const inference::ModelInferRequest& r, int i) {
  const auto& requested = r.outputs(i);
  const std::string where = "outputs[" + std::to_string(i) + "]: ";
  if (requested.parameters().count("classification") > 0) {
    return InvalidArgument(where + "parameter classification is not supported");
  }
  for (OutputTensor o : kAllOutputs) {
    if (requested.name() == OutputName(o)) return o;
  }
  return InvalidArgument(where + "unknown output '" + Abbreviate(requested.name()) +
                         "' (the model has output, attn_weights, attn_weights_topk_values, "
                         "attn_weights_topk_indices, head_entropy, head_max_weight)");
}

StatusOr<std::optional<bool>> HeadStatsParameter(const inference::ModelInferRequest& r) {
  const inference::InferParameter* p = FindParameter(r, kHeadStats);
  if (p == nullptr) return std::optional<bool>();
  if (p->parameter_choice_case() != inference::InferParameter::kBoolParam) {
    return Wrong(kHeadStats, "a bool_param");
  }
  return std::optional<bool>(p->bool_param());
}

bool Has(const std::vector<OutputTensor>& v, OutputTensor o) {
  return std::find(v.begin(), v.end(), o) != v.end();
}

}  // namespace

StatusOr<std::vector<OutputTensor>> SelectOutputs(const inference::ModelInferRequest& r,
                                                  std::optional<bool> need_weights,
                                                  HostInputs* in) {
  std::vector<OutputTensor> outputs;
  for (int i = 0; i < r.outputs_size(); ++i) {
    auto output = ParseOutput(r, i);
    if (!output.ok()) return output.status();
    if (Has(outputs, *output)) {
      return InvalidArgument("outputs[" + std::to_string(i) + "]: output '" + OutputName(*output) +
                             "' requested twice");
    }
    outputs.push_back(*output);
  }
  const bool top_k = in->weights_selection.top_k > 0;
  const bool dense = Has(outputs, OutputTensor::kAttnWeights);
  const bool topk_listed =
      Has(outputs, OutputTensor::kTopkValues) || Has(outputs, OutputTensor::kTopkIndices);
  if ((dense || topk_listed) && need_weights == false) {
    return InvalidArgument(std::string("outputs: ") + (dense ? kAttnWeights : kTopkValues) +
                           " requested but parameters.need_weights is false");
  }
  if (dense && top_k) {
    return InvalidArgument(
        "outputs: attn_weights requested but parameters.weights_top_k asks for "
        "attn_weights_topk_values and attn_weights_topk_indices instead");
  }
  if (topk_listed && !top_k) {
    return InvalidArgument(
        "outputs: attn_weights_topk_values/indices need parameters."
        "weights_top_k >= 1");
  }
  auto stats = HeadStatsParameter(r);
  if (!stats.ok()) return stats.status();
  const bool stats_listed =
      Has(outputs, OutputTensor::kHeadEntropy) || Has(outputs, OutputTensor::kHeadMaxWeight);
  if (stats_listed && *stats == false) {
    return InvalidArgument("outputs: head statistics requested but parameters.head_stats is false");
  }
  in->need_weights = dense || topk_listed || need_weights.value_or(false);
  in->head_stats = stats_listed || stats->value_or(false);
  if (outputs.empty()) {
    outputs.push_back(OutputTensor::kOutput);
    if (in->need_weights && top_k) {
      outputs.insert(outputs.end(), {OutputTensor::kTopkValues, OutputTensor::kTopkIndices});
    } else if (in->need_weights) {
      outputs.push_back(OutputTensor::kAttnWeights);
    }
    if (in->head_stats) {
      outputs.insert(outputs.end(), {OutputTensor::kHeadEntropy, OutputTensor::kHeadMaxWeight});
    }
  }
  return outputs;
}

}  // namespace mha::serve::oip
