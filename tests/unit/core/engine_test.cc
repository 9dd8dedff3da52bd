// The core's torch-free face (mha/engine.h), against the fixtures PyTorch made: a model loaded
// from a case folder answers on the host what MhaModel answers, within 1e-5; its description,
// validation, the default model and the session calls on host tensors.
#include "mha/engine.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "mha/kv_cache.h"
#include "mha/model.h"
#include "mha/tensor_adapter.h"
#include "test_util.h"

namespace mha {
namespace engine_test {

using testing::kFp32Tolerance;
using testing::TensorsNear;

HostInputs HostOf(const ForwardInputs& in) {
  HostInputs h;
  h.query = ToHost(in.query);
  h.key = ToHost(in.key);
  h.value = ToHost(in.value);
  h.key_padding_mask = ToHost(in.key_padding_mask);
  h.attn_mask = ToHost(in.attn_mask);
  h.is_causal = in.is_causal;
  h.need_weights = in.need_weights;
  h.average_attn_weights = in.average_attn_weights;
  return h;
}

TEST(Engine, LoadedModelAnswersOnTheHostAsPyTorch) {
  for (const char* name : {"self_basic", "cross_attention", "kpm_float"}) {
    SCOPED_TRACE(name);
    auto c = testing::LoadFixtureCase(name);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    LoadOptions options;
    options.path = c->weights_path;
    auto loaded = LoadModel(options);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_EQ(loaded->format, "safetensors");
    EXPECT_EQ(loaded->info.options.embed_dim, c->inputs.query.size(2));
    // device "auto": CUDA where there is one (the GPU device's ctest), else the CPU.
    EXPECT_EQ(loaded->info.device, at::hasCUDA() ? "cuda:0" : "cpu");
    EXPECT_GT(loaded->info.parameter_count, 0);
    const HostInputs in = HostOf(c->inputs);
    ASSERT_TRUE(ValidateInputs(*loaded->model, in).ok());
    auto out = Forward(*loaded->model, in, OutputTypes{ElementType::kFloat32, std::nullopt});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_TRUE(TensorsNear(ToTensor(out->output), c->expected_output, kFp32Tolerance));
    if (c->inputs.need_weights) {
      EXPECT_TRUE(TensorsNear(ToTensor(out->attn_weights), c->expected_weights, kFp32Tolerance));
    }
  }
}

TEST(Engine, ValidationNamesTheFieldAndTheAnswerTakesTheAskedType) {
  auto c = testing::LoadFixtureCase("self_basic");
  ASSERT_TRUE(c.ok());
  LoadOptions options;
  options.path = c->weights_path;
  auto loaded = LoadModel(options);
  ASSERT_TRUE(loaded.ok());
  HostInputs in = HostOf(c->inputs);
  in.query = HostTensor::FromFloats({1, 2, 3}, std::vector<float>(6, 0.5f));
  const Status bad = ValidateInputs(*loaded->model, in);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(testing::Contains(bad.message(), "query")) << bad.message();
  auto half =
      Forward(*loaded->model, HostOf(c->inputs), OutputTypes{ElementType::kFloat16, std::nullopt});
  ASSERT_TRUE(half.ok());
  EXPECT_EQ(half->output.dtype(), ElementType::kFloat16);
}

TEST(Engine, DefaultModelIsTheSameEveryTime) {
  MhaOptions o;
  o.embed_dim = 16;
  o.num_heads = 2;
  auto a = BuildDefaultModel(o), b = BuildDefaultModel(o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->format, "builtin");
  EXPECT_TRUE(at::equal(a->model->weights().q_weight, b->model->weights().q_weight));
  o.device = "nonsense";
  EXPECT_FALSE(BuildDefaultModel(o).ok());
}

TEST(Engine, SessionCallsOnHostTensors) {
  auto c = testing::LoadFixtureCase("cross_attention");
  ASSERT_TRUE(c.ok());
  auto model = testing::LoadCaseModel(*c);
  ASSERT_NE(model, nullptr);
  auto pool = KvBlockPool::Create(KvPoolOptions{1 << 20, 4}, *model);
  ASSERT_TRUE(pool.ok());
  const int64_t b = c->inputs.query.size(0);
  KvCache cache(*pool, b);
  ASSERT_TRUE(PrefillSession(*model, &cache, ToHost(c->inputs.key), ToHost(c->inputs.value)).ok());
  EXPECT_EQ(cache.length(), c->inputs.key.size(1));
  HostInputs step;
  step.query = ToHost(c->inputs.query.narrow(1, 0, 1).contiguous());
  EXPECT_TRUE(CheckSessionStep(*model, cache, true, step).ok());
  step.query = HostTensor::FromFloats({b + 1, 1, c->inputs.query.size(2)},
                                      std::vector<float>((b + 1) * c->inputs.query.size(2)));
  EXPECT_EQ(CheckSessionStep(*model, cache, true, step).code(), StatusCode::kInvalidArgument);
}

}  // namespace engine_test
}  // namespace mha
