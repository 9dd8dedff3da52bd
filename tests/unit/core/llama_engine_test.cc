// mha/llama_engine.h, the torch-free face of the Llama stacks: loading and describing a checkpoint
// folder, the stateless forward of any layer on host tensors and the batched step of sessions
// against the PyTorch fixtures (tests/fixtures/llama, fp32 <= 1e-5), the answer cast once to the
// requested type, the shape refusals, and a refused or failed step leaving every cache as it was.
#include "mha/llama_engine.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "llama_test_util.h"
#include "mha/tensor_adapter.h"
#include "test_util.h"

namespace mha {
namespace llama_engine_test {

using testing::Contains;
using testing::kFp32Tolerance;
using testing::LoadLlamaCase;
using testing::TensorsNear;

LoadedLlamaModel Load(const std::string& name) {
  LlamaLoadOptions options;
  options.path = testing::FixturePath("llama/" + name);
  options.device = "cpu";
  auto loaded = LoadLlamaModel(options);
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  return loaded.ok() ? loaded.value() : LoadedLlamaModel();
}

TEST(LlamaEngine, LoadsAFolderAndDescribesIt) {
  const LoadedLlamaModel m = Load("gqa_ratio4");  // H=8 KV=2, E=64 D=8, 2 layers
  ASSERT_NE(m.stack, nullptr);
  EXPECT_EQ(m.info.num_layers, 2);
  EXPECT_EQ(m.info.hidden_size, 64);
  EXPECT_EQ(m.info.num_heads, 8);
  EXPECT_EQ(m.info.num_kv_heads, 2);
  EXPECT_EQ(m.info.head_dim, 8);
  EXPECT_EQ(m.info.max_positions, 128);
  EXPECT_EQ(m.info.rope_theta, 500000.0);
  EXPECT_EQ(m.info.device, "cpu");
  EXPECT_EQ(m.info.dtype, DType::kFloat32);
  EXPECT_EQ(m.info.kv_bytes_per_token, 2 * 2 * 8 * 4);  // K and V of the 2 KV heads, fp32
  EXPECT_EQ(m.info.parameter_count, 2 * (64 * 64 + 2 * 16 * 64 + 64 * 64));
}

TEST(LlamaEngine, LoadErrorsNameTheFile) {
  LlamaLoadOptions options;
  options.path = testing::FixturePath("llama/no_such_case");
  auto loaded = LoadLlamaModel(options);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(loaded.status().message(), "no_such_case"));
}

TEST(LlamaEngine, StatelessForwardOfEveryLayerEqualsTheReference) {
  for (const std::string& name : testing::LlamaCaseNames("stateless")) {
    const testing::LlamaCase c = LoadLlamaCase(name);
    const LoadedLlamaModel m = Load(name);
    ASSERT_NE(m.stack, nullptr) << name;
    const HostTensor input = ToHost(c.Io("input"));
    for (int64_t layer = 0; layer < m.info.num_layers; ++layer) {
      auto out = LlamaForward(*m.stack, layer, input, ElementType::kFloat32);
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      EXPECT_EQ(out->dtype(), ElementType::kFloat32);
      EXPECT_TRUE(
          TensorsNear(ToTensor(*out), c.Io("output." + std::to_string(layer)), kFp32Tolerance))
          << name << " layer " << layer;
    }
  }
}

TEST(LlamaEngine, TheAnswerIsCastOnceToTheRequestedType) {
  const testing::LlamaCase c = LoadLlamaCase("gqa_ratio4");
  const LoadedLlamaModel m = Load("gqa_ratio4");
  ASSERT_NE(m.stack, nullptr);
  auto fp32 = LlamaForward(*m.stack, 1, ToHost(c.Io("input")), ElementType::kFloat32);
  auto bf16 = LlamaForward(*m.stack, 1, ToHost(c.Io("input")), ElementType::kBFloat16);
  ASSERT_TRUE(fp32.ok() && bf16.ok());
  EXPECT_EQ(bf16->dtype(), ElementType::kBFloat16);
  EXPECT_EQ(bf16->shape(), fp32->shape());
  EXPECT_TRUE(at::equal(ToTensor(*bf16), ToTensor(*fp32).to(at::kBFloat16)));
}

TEST(LlamaEngine, HiddenOfAnotherShapeIsRefusedNamingTheField) {
  const LoadedLlamaModel m = Load("gqa_ratio4");
  ASSERT_NE(m.stack, nullptr);
  const HostTensor good = HostTensor::FromFloats({3, 64}, std::vector<float>(3 * 64, 0.5f));
  EXPECT_TRUE(CheckLlamaHidden(m.info, good, 2, "entries[0].hidden").ok());
  const HostTensor narrow = HostTensor::FromFloats({3, 32}, std::vector<float>(3 * 32, 0.5f));
  Status s = CheckLlamaHidden(m.info, narrow, 2, "entries[1].hidden");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s.message(),
                       "entries[1].hidden: expected floating [t >= 1, 64] (new tokens, "
                       "hidden_size), got [3, 32] float32"))
      << s.message();
  s = CheckLlamaHidden(m.info, good, 3, "query");
  EXPECT_TRUE(Contains(s.message(), "query: expected floating [B >= 1, T >= 1, 64]"))
      << s.message();
  auto ints = HostTensor::Copy(ElementType::kInt32, {1, 64}, std::vector<int32_t>(64).data(), 256);
  ASSERT_TRUE(ints.ok());
  EXPECT_TRUE(Contains(CheckLlamaHidden(m.info, *ints, 2, "h").message(), "got [1, 64] int32"));
  EXPECT_TRUE(Contains(CheckLlamaHidden(m.info, HostTensor(), 2, "h").message(), "got none"));
  auto stateless = LlamaForward(*m.stack, 2, ToHost(at::zeros({1, 2, 64})), ElementType::kFloat32);
  EXPECT_EQ(stateless.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(stateless.status().message(), "layer 2 out of range"));
}

// The sessions fixture (L=4, 8 sessions): every session's chunks, layer by layer, all sessions of
// a layer in one StepLlamaSessions call; each output equals the layer's causal forward rows.
TEST(LlamaEngine, StepsOfSessionsEqualEveryLayersCausalForward) {
  const testing::LlamaCase c = LoadLlamaCase("stack4_sessions");
  const LoadedLlamaModel m = Load("stack4_sessions");
  ASSERT_NE(m.stack, nullptr);
  auto pool = CreateLlamaKvPool(*m.stack, KvPoolOptions{int64_t{4} << 20, 8});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  const auto& meta = c.meta.at("sessions");
  std::vector<std::unique_ptr<LlamaSessionCache>> sessions;
  std::vector<at::Tensor> x;  // each session's layer input, [T, E]
  std::vector<std::vector<int64_t>> chunks;
  for (size_t i = 0; i < meta.size(); ++i) {
    auto s = CreateLlamaSession(*m.stack, *pool, m.info.max_positions);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    sessions.push_back(std::move(s.value()));
    x.push_back(c.Io("s" + std::to_string(i) + ".input"));
    chunks.push_back(meta[i].at("prefill").get<std::vector<int64_t>>());
    chunks.back().insert(chunks.back().end(), 8, 1);  // 8 of the fixture's single steps
  }
  std::vector<int64_t> done(sessions.size(), 0);
  for (size_t round = 0; round < 12; ++round) {
    std::vector<size_t> who;
    for (size_t i = 0; i < sessions.size(); ++i) {
      if (round < chunks[i].size()) who.push_back(i);
    }
    if (who.empty()) break;
    std::vector<at::Tensor> h(sessions.size());
    for (size_t i : who) h[i] = x[i].narrow(0, done[i], chunks[i][round]);
    for (int64_t layer = 0; layer < m.info.num_layers; ++layer) {
      std::vector<LlamaHostEntry> entries;
      for (size_t i : who) entries.push_back({sessions[i].get(), ToHost(h[i])});
      auto outs = StepLlamaSessions(*m.stack, layer, entries);
      ASSERT_TRUE(outs.ok()) << outs.status().ToString();
      ASSERT_EQ(outs->size(), who.size());
      for (size_t k = 0; k < who.size(); ++k) {
        const size_t i = who[k];
        const at::Tensor got = ToTensor((*outs)[k]);
        const at::Tensor want = c.Io("s" + std::to_string(i) + ".output." + std::to_string(layer))
                                    .narrow(0, done[i], chunks[i][round]);
        EXPECT_TRUE(TensorsNear(got, want, kFp32Tolerance))
            << "session " << i << " layer " << layer;
        h[i] = h[i] + got;  // the fixture's residual stream
      }
    }
    for (size_t i : who) done[i] += chunks[i][round];
  }
  for (size_t i = 0; i < sessions.size(); ++i) EXPECT_EQ(sessions[i]->length(3), done[i]);
}

TEST(LlamaEngine, ARefusedStepLeavesEveryCacheAsItWas) {
  const LoadedLlamaModel m = Load("stack4_sessions");
  ASSERT_NE(m.stack, nullptr);
  auto pool = CreateLlamaKvPool(*m.stack, KvPoolOptions{int64_t{1} << 20, 4});
  ASSERT_TRUE(pool.ok());
  auto a = CreateLlamaSession(*m.stack, *pool, 0);
  auto b = CreateLlamaSession(*m.stack, *pool, 0);
  ASSERT_TRUE(a.ok() && b.ok());
  const HostTensor two = ToHost(at::randn({2, 32}));
  auto first = StepLlamaSessions(*m.stack, 0, {{a->get(), two}, {b->get(), two}});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // Layer 1 may not get ahead of layer 0: b's entry is refused, and a is not stepped either.
  auto ahead =
      StepLlamaSessions(*m.stack, 1, {{a->get(), two}, {b->get(), ToHost(at::randn({3, 32}))}});
  EXPECT_EQ(ahead.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(ahead.status().message(),
                       "entry 1: layer 1 would hold 3 tokens, more than layer 0's 2"))
      << ahead.status().message();
  EXPECT_EQ((*a)->length(1), 0);
  auto twice = StepLlamaSessions(*m.stack, 0, {{a->get(), two}, {a->get(), two}});
  EXPECT_EQ(twice.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(twice.status().message(), "entry 1: the same session as entry 0"));
  auto bad =
      StepLlamaSessions(*m.stack, 0, {{a->get(), two}, {b->get(), ToHost(at::randn({2, 31}))}});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(bad.status().message(), "entry 1: hidden: expected floating [t >= 1, 32]"));
  EXPECT_EQ((*a)->length(0), 2);
  EXPECT_EQ((*b)->length(0), 2);
  auto half = StepLlamaSessions(*m.stack, 1, {{a->get(), two, ElementType::kFloat16}});
  ASSERT_TRUE(half.ok()) << half.status().ToString();
  EXPECT_EQ((*half)[0].dtype(), ElementType::kFloat16);
  EXPECT_EQ((*a)->length(1), 2);
}

}  // namespace llama_engine_test
}  // namespace mha
