#include "server/frontends/grpc_v1/head_options.h"

#include <string>

#include "proto/wire/tensor_codec.h"

namespace mha::serve {
namespace {

// The codec's dtype mapping, restricted to the floating types.
StatusOr<ElementType> WeightsElementType(v1::DataType dtype) {
  auto type = codec::ToElementType(dtype);
  if (!type.ok() || !IsFloating(*type)) {
    return InvalidArgument("weights_dtype: " + codec::DataTypeName(dtype) +
                           " is not a floating type (FLOAT32, FLOAT16 or BFLOAT16)");
  }
  return *type;
}

void FillProjection(const ProjectionAnalysis& a, v1::ProjectionAnalysis* out) {
  out->mutable_head_importance()->Add(a.head_importance.begin(), a.head_importance.end());
  out->mutable_head_correlation()->Add(a.head_correlation.begin(), a.head_correlation.end());
  out->set_effective_rank(a.effective_rank);
  out->set_max_rank(a.max_rank);
  out->mutable_head_effective_rank()->Add(a.head_effective_rank.begin(),
                                          a.head_effective_rank.end());
  out->set_head_max_rank(a.head_max_rank);
}

}  // namespace

Status DecodeHeadOptions(const v1::ForwardRequest& r, bool borrow, HostInputs* in) {
  WeightsSelection& s = in->weights_selection;
  s.heads.assign(r.weights_heads().begin(), r.weights_heads().end());
  if (r.has_weights_query_begin()) s.query_begin = r.weights_query_begin();
  if (r.has_weights_query_end()) s.query_end = r.weights_query_end();
  s.top_k = r.weights_top_k();
  if (r.weights_top_k() < 0) {
    return InvalidArgument("weights_top_k: " + std::to_string(r.weights_top_k()) +
                           " must be >= 1 (0 = dense weights)");
  }
  switch (r.weights_topk_indices_dtype()) {
    case v1::DATA_TYPE_UNSPECIFIED:
    case v1::INT32:
      break;
    case v1::INT64:
      s.topk_indices_int64 = true;
      break;
    default:
      return InvalidArgument(
          "weights_topk_indices_dtype: " + codec::DataTypeName(r.weights_topk_indices_dtype()) +
          " is not an index type (INT32 or INT64)");
  }
  if (r.weights_dtype() != v1::DATA_TYPE_UNSPECIFIED) {
    auto type = WeightsElementType(r.weights_dtype());
    if (!type.ok()) return type.status();
    in->weights_dtype = *type;
  }
  // weights_heads asks for those heads' own weights: per head unless averaging is asked for.
  if (!s.heads.empty() && !r.has_average_attn_weights()) in->average_attn_weights = false;
  in->head_stats = r.head_stats();
  if (r.has_head_mask()) {
    const v1::DataType dtype = r.head_mask().dtype();
    if (dtype == v1::BOOL || dtype == v1::INT32 || dtype == v1::INT64) {
      return InvalidArgument("head_mask: dtype " + codec::DataTypeName(dtype) +
                             " is not allowed (a float per head, FLOAT32, FLOAT16 or BFLOAT16: "
                             "0 drops the head)");
    }
    auto mask = codec::DecodeTensor(r.head_mask(), "head_mask", borrow);
    if (!mask.ok()) return mask.status();
    in->head_mask = std::move(mask.value());
  }
  return Status::Ok();
}

Status EncodeHeadOutputs(const HostOutputs& o, v1::ForwardResponse* out) {
  if (o.attn_weights.defined()) {
    MHA_RETURN_IF_ERROR(codec::EncodeTensor(o.attn_weights, out->mutable_attn_weights()));
  }
  if (o.topk_values.defined()) {
    MHA_RETURN_IF_ERROR(
        codec::EncodeTensor(o.topk_values, out->mutable_attn_weights_topk_values()));
    MHA_RETURN_IF_ERROR(
        codec::EncodeTensor(o.topk_indices, out->mutable_attn_weights_topk_indices()));
  }
  if (o.head_entropy.defined()) {
    MHA_RETURN_IF_ERROR(codec::EncodeTensor(o.head_entropy, out->mutable_head_entropy()));
    MHA_RETURN_IF_ERROR(codec::EncodeTensor(o.head_max_weight, out->mutable_head_max_weight()));
  }
  return Status::Ok();
}

void FillModelAnalysis(const ModelAnalysisResult& result, v1::ModelAnalysis* out) {
  const HeadAnalysis& a = *result.analysis;
  out->set_model(result.model);
  out->set_model_version(result.model_version);
  out->set_num_heads(a.num_heads);
  out->set_head_dim(a.head_dim);
  out->set_embed_dim(a.embed_dim);
  FillProjection(a.output, out->mutable_output_projection());
  out->mutable_output_dim_contribution()->Add(a.output_dim_contribution.begin(),
                                              a.output_dim_contribution.end());
  FillProjection(a.query, out->mutable_query_projection());
  FillProjection(a.key, out->mutable_key_projection());
  FillProjection(a.value, out->mutable_value_projection());
}

}  // namespace mha::serve
