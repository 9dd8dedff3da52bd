// Helpers shared by the batching tests: fixture models and random requests of a given shape and
// mask kind. Random bool masks always leave key 0 visible, so no row is fully masked (unless a
// test asks for it).
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "mha/loader.h"
#include "mha/model.h"
#include "mha/tensor_adapter.h"
#include "mha/weights.h"
#include "test_util.h"

namespace mha::testing {

enum class MaskKind { kNone, kBool, kFloat, kBool3d, kFloat3d };

struct RequestSpec {
  int64_t b = 1, t = 4, s = 0;  // s = 0: self-attention
  MaskKind kpm = MaskKind::kNone;
  MaskKind attn = MaskKind::kNone;  // kBool/kFloat: [T, S]; kBool3d/kFloat3d: [B*H, T, S]
  bool causal = false, need_weights = false, average = true;
};

// The server's built-in deterministic weights at E=16, H=4, on the CPU.
inline std::shared_ptr<const MhaModel> SmallModel() {
  MhaOptions o;
  o.embed_dim = 16;
  o.num_heads = 4;
  o.device = "cpu";
  auto model = MhaModel::Create(o, DefaultModelWeights(16));
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return model.ok() ? std::shared_ptr<const MhaModel>(std::move(model.value())) : nullptr;
}

inline std::shared_ptr<const MhaModel> LoadFixtureModel(const std::string& case_name) {
  auto c = LoadFixtureCase(case_name);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? LoadCaseModel(*c) : nullptr;
}

inline at::Tensor RandomMask(MaskKind kind, std::vector<int64_t> sizes, at::Generator& gen) {
  if (kind == MaskKind::kNone) return at::Tensor();
  if (kind == MaskKind::kBool || kind == MaskKind::kBool3d) {
    at::Tensor m = at::rand(sizes, gen) < 0.3;
    m.select(-1, 0).fill_(false);  // key 0 stays visible
    return m;
  }
  return at::randn(sizes, gen);
}

inline ForwardInputs MakeRequest(const MhaOptions& o, const RequestSpec& spec, at::Generator& gen) {
  ForwardInputs in;
  in.query = at::randn({spec.b, spec.t, o.embed_dim}, gen);
  const int64_t s = spec.s > 0 ? spec.s : spec.t;
  if (spec.s > 0) {
    in.key = at::randn({spec.b, s, o.key_dim()}, gen);
    in.value = at::randn({spec.b, s, o.value_dim()}, gen);
  }
  if (spec.kpm != MaskKind::kNone) {
    const MaskKind kind = spec.kpm == MaskKind::kBool3d ? MaskKind::kBool : spec.kpm;
    in.key_padding_mask = RandomMask(kind, {spec.b, s}, gen);
  }
  const bool mask3d = spec.attn == MaskKind::kBool3d || spec.attn == MaskKind::kFloat3d;
  in.attn_mask = RandomMask(spec.attn,
                            mask3d ? std::vector<int64_t>{spec.b * o.num_heads, spec.t, s}
                                   : std::vector<int64_t>{spec.t, s},
                            gen);
  in.is_causal = spec.causal;
  in.need_weights = spec.need_weights;
  in.average_attn_weights = spec.average;
  return in;
}

inline at::Generator MakeGenerator(uint64_t seed) {
  return at::make_generator<at::CPUGeneratorImpl>(seed);
}

}  // namespace mha::testing
