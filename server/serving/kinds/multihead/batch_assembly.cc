#include "server/serving/kinds/multihead/batch_assembly.h"

#include <algorithm>

namespace mha::serve {

BatchModelInfo MakeBatchModelInfo(const ModelInfo& model) {
  BatchModelInfo info;
  info.num_heads = model.options.num_heads;
  info.extra_keys = (model.options.add_bias_kv ? 1 : 0) + (model.options.add_zero_attn ? 1 : 0);
  info.mask_dtype = model.compute_dtype;
  info.embed_dim = model.options.embed_dim;
  info.on_device = model.device.rfind("cuda", 0) == 0;
  info.block_bytes = model.options.attention_block_bytes;
  return info;
}

int64_t LengthBucket(int64_t length) {
  constexpr int64_t kMinWidth = 8;
  if (length <= kMinWidth) return kMinWidth;
  int64_t pow2 = kMinWidth;
  while (pow2 < length && pow2 < (int64_t{1} << 40)) pow2 <<= 1;
  const int64_t width = std::max<int64_t>(kMinWidth, pow2 / 8);
  return (length + width - 1) / width * width;
}

bool GroupKey::operator==(const GroupKey& o) const {
  return cross == o.cross && is_causal == o.is_causal && need_weights == o.need_weights &&
         average_attn_weights == o.average_attn_weights && query_dtype == o.query_dtype &&
         key_dtype == o.key_dtype && value_dtype == o.value_dtype && t_bucket == o.t_bucket &&
         s_bucket == o.s_bucket && solo == o.solo && session == o.session;
}

GroupKey MakeStepGroupKey(const HostTensor& query, bool cross) {
  GroupKey key;
  key.cross = cross;
  key.session = query.size(1) == 1 ? 1 : 2;
  return key;
}

GroupKey MakeGroupKey(const HostInputs& in) {
  GroupKey key;
  key.cross = in.key.defined();
  key.is_causal = in.is_causal;
  key.need_weights = in.need_weights;
  key.average_attn_weights = in.need_weights && in.average_attn_weights;
  key.query_dtype = static_cast<int8_t>(in.query.dtype());
  key.solo = in.wants_head_options();
  const RequestShape shape = ShapeOf(in);
  key.t_bucket = LengthBucket(shape.t);
  if (key.cross) {
    key.key_dtype = static_cast<int8_t>(in.key.dtype());
    key.value_dtype = static_cast<int8_t>(in.value.dtype());
    key.s_bucket = LengthBucket(shape.s);
  }
  return key;
}

RequestShape ShapeOf(const HostInputs& in) {
  RequestShape shape;
  shape.rows = in.query.size(0);
  shape.t = in.query.size(1);
  shape.s = in.key.defined() ? in.key.size(1) : shape.t;
  return shape;
}

TokenCount CountTokens(const std::vector<RequestShape>& shapes, bool cross) {
  TokenCount count;
  int64_t rows = 0, t_max = 0, s_max = 0;
  for (const RequestShape& s : shapes) {
    count.real += s.rows * (s.t + (cross ? s.s : 0));
    rows += s.rows;
    t_max = std::max(t_max, s.t);
    s_max = std::max(s_max, s.s);
  }
  count.padded = rows * (t_max + (cross ? s_max : 0));
  return count;
}

}  // namespace mha::serve
