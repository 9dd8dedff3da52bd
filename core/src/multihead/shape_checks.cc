#include "multihead/shape_checks.h"

#include <sstream>
#include <vector>

#include "mha/head_selection.h"

namespace mha {
namespace {

std::string Dims(const std::vector<std::string>& names) {
  std::string out = "[";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return out + "]";
}

std::string Named(const char* name, int64_t value) {
  return std::string(name) + "=" + std::to_string(value);
}

Status CheckParam(const char* name, const at::Tensor& t, std::vector<int64_t> expected,
                  bool required) {
  if (!t.defined()) {
    if (!required) return Status::Ok();
    return InvalidArgument("weights: " + std::string(name) + " is missing, expected shape " +
                           ShapeString(expected));
  }
  if (!required) {
    return InvalidArgument("weights: " + std::string(name) + " is present (shape " +
                           ShapeString(t.sizes()) + ") but the options say it is not used");
  }
  if (!t.sizes().equals(expected)) {
    return InvalidArgument("weights: " + std::string(name) + " has shape " +
                           ShapeString(t.sizes()) + ", expected " + ShapeString(expected));
  }
  if (!t.is_floating_point()) {
    return InvalidArgument("weights: " + std::string(name) + " has dtype " +
                           std::string(c10::toString(t.scalar_type())) +
                           ", expected a floating-point dtype");
  }
  return Status::Ok();
}

// Rank, positive dims and a floating or bool dtype; `allow_bool` for masks.
Status CheckTensor(const char* field, const at::Tensor& t, bool allow_bool) {
  for (int64_t d : t.sizes()) {
    if (d <= 0) {
      return InvalidArgument(std::string(field) + ": every dimension must be > 0, got shape " +
                             ShapeString(t.sizes()));
    }
  }
  if (!(t.is_floating_point() || (allow_bool && t.scalar_type() == at::kBool))) {
    return InvalidArgument(
        std::string(field) + ": dtype " + std::string(c10::toString(t.scalar_type())) +
        " is not supported, expected " +
        (allow_bool ? "bool or a floating-point dtype" : "a floating-point dtype"));
  }
  return Status::Ok();
}

Status ExpectShape(const char* field, const at::Tensor& t, const std::vector<int64_t>& expected,
                   const std::vector<std::string>& names) {
  if (t.sizes().equals(expected)) return Status::Ok();
  return InvalidArgument(std::string(field) + ": expected shape " + Dims(names) + " = " +
                         ShapeString(expected) + ", got " + ShapeString(t.sizes()));
}

}  // namespace

Status CheckWeightShapes(const MhaOptions& o, const MhaWeights& w) {
  const int64_t e = o.embed_dim;
  MHA_RETURN_IF_ERROR(CheckParam("q_weight", w.q_weight, {e, e}, true));
  MHA_RETURN_IF_ERROR(CheckParam("k_weight", w.k_weight, {e, o.key_dim()}, true));
  MHA_RETURN_IF_ERROR(CheckParam("v_weight", w.v_weight, {e, o.value_dim()}, true));
  MHA_RETURN_IF_ERROR(CheckParam("q_bias", w.q_bias, {e}, o.bias));
  MHA_RETURN_IF_ERROR(CheckParam("k_bias", w.k_bias, {e}, o.bias));
  MHA_RETURN_IF_ERROR(CheckParam("v_bias", w.v_bias, {e}, o.bias));
  MHA_RETURN_IF_ERROR(CheckParam("out_weight", w.out_weight, {e, e}, true));
  MHA_RETURN_IF_ERROR(CheckParam("out_bias", w.out_bias, {e}, o.bias));
  MHA_RETURN_IF_ERROR(CheckParam("bias_k", w.bias_k, {1, 1, e}, o.add_bias_kv));
  MHA_RETURN_IF_ERROR(CheckParam("bias_v", w.bias_v, {1, 1, e}, o.add_bias_kv));
  return Status::Ok();
}

Status CheckForwardInputs(const MhaOptions& o, const ForwardInputs& in) {
  const int64_t e = o.embed_dim, h = o.num_heads;
  if (!in.query.defined()) return InvalidArgument("query: required, got none");
  if (in.query.dim() != 3) {
    return InvalidArgument("query: expected rank 3 [B, T, E=" + std::to_string(e) +
                           "], got shape " + ShapeString(in.query.sizes()));
  }
  MHA_RETURN_IF_ERROR(CheckTensor("query", in.query, false));
  const int64_t b = in.query.size(0), t = in.query.size(1);
  MHA_RETURN_IF_ERROR(ExpectShape("query", in.query, {b, t, e}, {"B", "T", Named("E", e)}));

  if (in.key.defined() != in.value.defined()) {
    return InvalidArgument(std::string("key and value: give both (cross-attention) or neither "
                                       "(self-attention); got only ") +
                           (in.key.defined() ? "key" : "value"));
  }
  int64_t s = t;
  if (in.key.defined()) {
    for (auto [field, tensor, dim] :
         {std::tuple{"key", &in.key, o.key_dim()}, std::tuple{"value", &in.value, o.value_dim()}}) {
      if (tensor->dim() != 3) {
        return InvalidArgument(std::string(field) + ": expected rank 3 [B=" + std::to_string(b) +
                               ", S, " + std::to_string(dim) + "], got shape " +
                               ShapeString(tensor->sizes()));
      }
      MHA_RETURN_IF_ERROR(CheckTensor(field, *tensor, false));
    }
    s = in.key.size(1);
    MHA_RETURN_IF_ERROR(ExpectShape("key", in.key, {b, s, o.key_dim()},
                                    {Named("B", b), "S", Named("kdim", o.key_dim())}));
    MHA_RETURN_IF_ERROR(ExpectShape("value", in.value, {b, s, o.value_dim()},
                                    {Named("B", b), Named("S", s), Named("vdim", o.value_dim())}));
  } else if (!o.same_embed_dim()) {
    return InvalidArgument(
        "key and value: required, the model's kdim=" + std::to_string(o.key_dim()) +
        "/vdim=" + std::to_string(o.value_dim()) + " differ from embed_dim=" + std::to_string(e) +
        " so it cannot run self-attention");
  }
  if (in.key_padding_mask.defined()) {
    MHA_RETURN_IF_ERROR(CheckTensor("key_padding_mask", in.key_padding_mask, true));
    MHA_RETURN_IF_ERROR(ExpectShape("key_padding_mask", in.key_padding_mask, {b, s},
                                    {Named("B", b), Named("S", s)}));
  }
  if (in.attn_mask.defined()) {
    const at::Tensor& m = in.attn_mask;
    MHA_RETURN_IF_ERROR(CheckTensor("attn_mask", m, true));
    const bool ok2d = m.dim() == 2 && m.sizes().equals({t, s});
    const bool ok3d = m.dim() == 3 && m.sizes().equals({b * h, t, s});
    if (!ok2d && !ok3d) {
      return InvalidArgument("attn_mask: expected shape [T, S] = " + ShapeString({t, s}) +
                             " or [B*H, T, S] = " + ShapeString({b * h, t, s}) + ", got " +
                             ShapeString(m.sizes()));
    }
  }
  const int64_t keys = s + (o.add_bias_kv ? 1 : 0) + (o.add_zero_attn ? 1 : 0);
  return CheckHeadOptions(o, in, keys);
}

}  // namespace mha
