// Key layouts of an attention layer's weights, detected by name (see layouts.h).
//
// Bias policy: PyTorch's nn.MultiheadAttention has one `bias` flag, but other layouts bias each
// Linear separately (a timm-style Attention's fused qkv Linear has qkv_bias=False while its proj
// Linear keeps its bias; Whisper's k_proj has none). A layer is therefore bias=true when any
// projection has a bias, and the missing ones are represented as zeros -- the same function, and a
// single flag.
#include "load/layouts.h"

#include <ATen/ATen.h>

#include <set>
#include <sstream>

#include "mha/shape_string.h"

namespace mha::internal {
namespace {

// Names of one layout. A fused weight is [3E, E] (q, k, v stacked by rows, as
// nn.MultiheadAttention's in_proj_weight and a timm-style qkv Linear); a fused bias is [3E].
struct LayoutNames {
  const char* layout;
  const char* marker;  // the key whose presence selects this layout
  const char* fused_weight;
  const char* fused_bias;
  const char* weights[3];  // q, k, v when not fused
  const char* biases[3];
  const char* out_weight;
  const char* out_bias;
};

constexpr LayoutNames kLayouts[] = {
    {"packed",
     "in_proj_weight",
     "in_proj_weight",
     "in_proj_bias",
     {},
     {},
     "out_proj.weight",
     "out_proj.bias"},
    {"separate_proj",
     "q_proj_weight",
     nullptr,
     "in_proj_bias",
     {"q_proj_weight", "k_proj_weight", "v_proj_weight"},
     {},
     "out_proj.weight",
     "out_proj.bias"},
    {"fused_qkv", "qkv.weight", "qkv.weight", "qkv.bias", {}, {}, "proj.weight", "proj.bias"},
    {"wq_wk_wv",
     "W_q.weight",
     nullptr,
     nullptr,
     {"W_q.weight", "W_k.weight", "W_v.weight"},
     {"W_q.bias", "W_k.bias", "W_v.bias"},
     "fc_out.weight",
     "fc_out.bias"},
    {"q_k_v_proj",
     "q_proj.weight",
     nullptr,
     nullptr,
     {"q_proj.weight", "k_proj.weight", "v_proj.weight"},
     {"q_proj.bias", "k_proj.bias", "v_proj.bias"},
     "out_proj.weight",
     "out_proj.bias"},
};

// Looks keys up, checks dtype and shape, and remembers which keys were used.
class Reader {
 public:
  Reader(const std::string& file, const char* layout, const TensorMap& tensors)
      : file_(file), layout_(layout), tensors_(tensors) {}

  const std::string& file() const { return file_; }

  // Required non-empty 2-D key of any size (the one the other keys are measured by).
  Status GetMatrix(const char* key, at::Tensor* out) {
    MHA_RETURN_IF_ERROR(Get(key, /*required=*/true, out));
    if (out->dim() != 2 || out->size(0) == 0 || out->size(1) == 0) {
      return InvalidArgument(file_ + ": key '" + key + "' has shape " + ShapeString(out->sizes()) +
                             ", expected a non-empty 2-D weight (layout '" + layout_ + "')");
    }
    return Status::Ok();
  }

  // Key with exactly `expected` shape; absent optional keys leave *out undefined.
  Status GetShaped(const char* key, bool required, std::vector<int64_t> expected, at::Tensor* out) {
    *out = at::Tensor();
    if (key == nullptr) return Status::Ok();
    MHA_RETURN_IF_ERROR(Get(key, required, out));
    if (out->defined() && !out->sizes().equals(expected)) {
      return InvalidArgument(file_ + ": key '" + key + "' has shape " + ShapeString(out->sizes()) +
                             ", expected " + ShapeString(expected) + " (layout '" + layout_ + "')");
    }
    return Status::Ok();
  }

  std::vector<std::string> Unused() const {
    std::vector<std::string> unused;
    for (const auto& entry : tensors_) {
      if (used_.count(entry.first) == 0) unused.push_back(entry.first);
    }
    return unused;
  }

 private:
  Status Get(const char* key, bool required, at::Tensor* out) {
    auto it = tensors_.find(key);
    if (it == tensors_.end()) {
      if (!required) return Status::Ok();
      return InvalidArgument(file_ + ": key '" + key +
                             "' missing (reading the weights as layout '" + layout_ + "')");
    }
    used_.insert(key);
    const at::ScalarType type = it->second.scalar_type();
    if (type == at::kDouble) {
      *out = it->second.to(at::kFloat);
    } else if (type == at::kFloat || type == at::kHalf || type == at::kBFloat16) {
      *out = it->second;
    } else {
      return InvalidArgument(file_ + ": key '" + key + "' has dtype " + c10::toString(type) +
                             "; attention weights must be floating point (layout '" + layout_ +
                             "')");
    }
    return Status::Ok();
  }

  const std::string& file_;
  std::string layout_;
  const TensorMap& tensors_;
  std::set<std::string> used_;
};

Status Extract(const LayoutNames& names, Reader& reader, LayoutResult* result) {
  MhaWeights& w = result->weights;
  int64_t e = 0;
  if (names.fused_weight != nullptr) {
    at::Tensor fused;
    MHA_RETURN_IF_ERROR(reader.GetMatrix(names.fused_weight, &fused));
    e = fused.size(1);
    MHA_RETURN_IF_ERROR(reader.GetShaped(names.fused_weight, true, {3 * e, e}, &fused));
    w.q_weight = fused.narrow(0, 0, e);
    w.k_weight = fused.narrow(0, e, e);
    w.v_weight = fused.narrow(0, 2 * e, e);
    result->kdim = result->vdim = e;
  } else {
    MHA_RETURN_IF_ERROR(reader.GetMatrix(names.weights[0], &w.q_weight));
    e = w.q_weight.size(0);
    MHA_RETURN_IF_ERROR(reader.GetShaped(names.weights[0], true, {e, e}, &w.q_weight));
    MHA_RETURN_IF_ERROR(reader.GetMatrix(names.weights[1], &w.k_weight));
    result->kdim = w.k_weight.size(1);
    MHA_RETURN_IF_ERROR(reader.GetShaped(names.weights[1], true, {e, result->kdim}, &w.k_weight));
    MHA_RETURN_IF_ERROR(reader.GetMatrix(names.weights[2], &w.v_weight));
    result->vdim = w.v_weight.size(1);
    MHA_RETURN_IF_ERROR(reader.GetShaped(names.weights[2], true, {e, result->vdim}, &w.v_weight));
  }
  result->embed_dim = e;

  if (names.fused_bias != nullptr) {
    at::Tensor fused;
    MHA_RETURN_IF_ERROR(reader.GetShaped(names.fused_bias, false, {3 * e}, &fused));
    if (fused.defined()) {
      w.q_bias = fused.narrow(0, 0, e);
      w.k_bias = fused.narrow(0, e, e);
      w.v_bias = fused.narrow(0, 2 * e, e);
    }
  } else {
    MHA_RETURN_IF_ERROR(reader.GetShaped(names.biases[0], false, {e}, &w.q_bias));
    MHA_RETURN_IF_ERROR(reader.GetShaped(names.biases[1], false, {e}, &w.k_bias));
    MHA_RETURN_IF_ERROR(reader.GetShaped(names.biases[2], false, {e}, &w.v_bias));
  }
  MHA_RETURN_IF_ERROR(reader.GetShaped(names.out_weight, true, {e, e}, &w.out_weight));
  MHA_RETURN_IF_ERROR(reader.GetShaped(names.out_bias, false, {e}, &w.out_bias));

  // One bias flag: any bias present means all, the absent ones as zeros (see the file comment).
  at::Tensor* biases[] = {&w.q_bias, &w.k_bias, &w.v_bias, &w.out_bias};
  for (at::Tensor* b : biases) result->bias = result->bias || b->defined();
  if (result->bias) {
    for (at::Tensor* b : biases) {
      if (!b->defined()) *b = at::zeros({e}, w.q_weight.options());
    }
  }

  MHA_RETURN_IF_ERROR(reader.GetShaped("bias_k", false, {1, 1, e}, &w.bias_k));
  MHA_RETURN_IF_ERROR(reader.GetShaped("bias_v", false, {1, 1, e}, &w.bias_v));
  if (w.bias_k.defined() != w.bias_v.defined()) {
    return InvalidArgument(reader.file() + ": key '" +
                           std::string(w.bias_k.defined() ? "bias_v" : "bias_k") +
                           "' missing: add_bias_kv needs both bias_k and bias_v");
  }
  result->add_bias_kv = w.bias_k.defined();
  return Status::Ok();
}

}  // namespace

StatusOr<LayoutResult> ExtractLayout(const std::string& file, const TensorMap& tensors) {
  for (const LayoutNames& names : kLayouts) {
    if (tensors.count(names.marker) == 0) continue;
    LayoutResult result;
    result.layout = names.layout;
    Reader reader(file, names.layout, tensors);
    MHA_RETURN_IF_ERROR(Extract(names, reader, &result));
    result.unused_keys = reader.Unused();
    return result;
  }

  std::string found;
  size_t listed = 0;
  std::string hint;
  for (const auto& entry : tensors) {
    if (listed < 10) found += (listed++ ? ", " : "") + ("'" + entry.first + "'");
    for (const LayoutNames& names : kLayouts) {
      const std::string suffix = std::string(".") + names.marker;
      const std::string& key = entry.first;
      if (hint.empty() && key.size() > suffix.size() &&
          key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0) {
        hint = "; did you mean prefix '" + key.substr(0, key.size() - suffix.size()) + "'?";
      }
    }
  }
  if (tensors.size() > listed) found += ", ... (" + std::to_string(tensors.size()) + " keys)";
  return InvalidArgument(file + ": no known attention layout among keys [" + found +
                         "]; expected in_proj_weight (packed), q_proj_weight (separate_proj), "
                         "qkv.weight (fused_qkv), W_q.weight (wq_wk_wv) or q_proj.weight "
                         "(q_k_v_proj)" +
                         hint);
}

}  // namespace mha::internal
