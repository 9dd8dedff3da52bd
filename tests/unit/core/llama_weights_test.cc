// Loading a Llama-family checkpoint's attention (mha/llama_weights.h): folders, single files and
// sharded indexes; the other tensors ignored; missing, misshaped or unexpected tensors refused with
// the tensor's name and both shapes.
#include "mha/llama_weights.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "llama_test_util.h"
#include "mha/loader.h"
#include "test_util.h"

namespace mha {
namespace llama_weights_test {

using testing::Contains;

TensorMap FixtureTensors(const std::string& name) {
  auto tensors = ReadSafetensors(testing::FixturePath("llama/" + name + "/model.safetensors"));
  EXPECT_TRUE(tensors.ok()) << tensors.status().ToString();
  return tensors.ok() ? *tensors : TensorMap();
}

LlamaConfig FixtureConfig(const std::string& name) {
  auto config = ReadLlamaConfig(testing::FixturePath("llama/" + name + "/config.json"));
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  return config.ok() ? *config : LlamaConfig();
}

TEST(LlamaWeights, FolderLoadsEveryLayerAndIgnoresTheRestOfTheCheckpoint) {
  auto checkpoint = LoadLlamaCheckpoint(testing::FixturePath("llama/gqa_ratio4"));
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  ASSERT_EQ(checkpoint->layers.size(), 2u);
  const LlamaLayerWeights& l1 = checkpoint->layers[1];
  EXPECT_EQ(l1.q_weight.sizes().vec(), (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(l1.k_weight.sizes().vec(), (std::vector<int64_t>{16, 64}));  // KV=2 * D=8
  EXPECT_EQ(l1.v_weight.sizes().vec(), (std::vector<int64_t>{16, 64}));
  EXPECT_EQ(l1.o_weight.sizes().vec(), (std::vector<int64_t>{64, 64}));
  EXPECT_FALSE(l1.q_bias.defined());
  const TensorMap all = FixtureTensors("gqa_ratio4");
  EXPECT_TRUE(all.count("model.embed_tokens.weight") && all.count("model.norm.weight") &&
              all.count("model.layers.0.mlp.gate_proj.weight"));
  EXPECT_TRUE(at::equal(l1.k_weight, all.at("model.layers.1.self_attn.k_proj.weight")));
  ASSERT_EQ(checkpoint->files.size(), 1u);
  EXPECT_TRUE(Contains(checkpoint->config_path, "gqa_ratio4/config.json"));
}

TEST(LlamaWeights, SingleFileBiasesAndStoredDtypes) {
  auto bias = LoadLlamaCheckpoint(testing::FixturePath("llama/bias_head_dim/model.safetensors"));
  ASSERT_TRUE(bias.ok()) << bias.status().ToString();  // config.json beside the file
  EXPECT_EQ(bias->layers[0].o_weight.sizes().vec(), (std::vector<int64_t>{24, 32}));  // [E, H * D]
  EXPECT_EQ(bias->layers[0].k_bias.sizes().vec(), (std::vector<int64_t>{16}));
  EXPECT_EQ(bias->layers[0].o_bias.sizes().vec(), (std::vector<int64_t>{24}));
  auto mqa = LoadLlamaCheckpoint(testing::FixturePath("llama/mqa"));
  ASSERT_TRUE(mqa.ok()) << mqa.status().ToString();
  EXPECT_EQ(mqa->layers[0].k_weight.scalar_type(), at::kBFloat16);  // as stored
  EXPECT_EQ(mqa->layers[0].k_weight.size(0), 8);                    // one K/V head
}

TEST(LlamaWeights, ShardedIndexReadsOnlyTheShardsWithAttention) {
  testing::TempDir dir;
  TensorMap all = FixtureTensors("gqa_ratio4"), first, second, other;
  nlohmann::json map = nlohmann::json::object();
  for (const auto& [name, t] : all) {
    const bool layer1 = name.rfind("model.layers.1.", 0) == 0;
    TensorMap& shard = !IsLlamaAttentionTensor(name) ? other : layer1 ? second : first;
    shard[name] = t;
    map[name] = &shard == &other ? "other.safetensors" : layer1 ? "b.safetensors" : "a.safetensors";
  }
  ASSERT_TRUE(WriteSafetensors(dir.File("a.safetensors"), first).ok());
  ASSERT_TRUE(WriteSafetensors(dir.File("b.safetensors"), second).ok());
  // other.safetensors is never written: a shard without attention tensors is not opened.
  std::ofstream(dir.File("model.safetensors.index.json")) << nlohmann::json{{"weight_map", map}};
  std::ifstream config_in(testing::FixturePath("llama/gqa_ratio4/config.json"));
  std::ofstream(dir.File("config.json")) << config_in.rdbuf();
  auto checkpoint = LoadLlamaCheckpoint(dir.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  EXPECT_EQ(checkpoint->files.size(), 2u);
  EXPECT_TRUE(
      at::equal(checkpoint->layers[1].o_weight, all.at("model.layers.1.self_attn.o_proj.weight")));
}

TEST(LlamaWeights, MissingFilesAreNotFound) {
  testing::TempDir dir;
  auto none = LoadLlamaCheckpoint(dir.path());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(none.status().message(),
                       "neither model.safetensors nor model.safetensors.index.json"));
  auto no_config = LoadLlamaCheckpoint(testing::FixturePath("llama/mqa/model.safetensors"),
                                       dir.File("config.json"));
  EXPECT_EQ(no_config.status().code(), StatusCode::kNotFound);
}

TEST(LlamaWeights, BadTensorsNameTheTensorAndBothShapes) {
  const LlamaConfig config = FixtureConfig("gqa_ratio4");
  const TensorMap good = FixtureTensors("gqa_ratio4");
  ASSERT_TRUE(LlamaLayersFromTensors(config, good, "ckpt").ok());
  const std::string k1 = "model.layers.1.self_attn.k_proj.weight";
  struct Bad {
    std::string name;
    at::Tensor tensor;  // undefined: removed
    std::string message;
  };
  const Bad cases[] = {
      {k1, at::Tensor(), "ckpt: tensor '" + k1 + "' is missing (num_hidden_layers 2)"},
      {k1, at::zeros({64, 64}),
       "ckpt: tensor '" + k1 +
           "' has shape [64, 64], expected [16, 64] [num_key_value_heads 2 * head_dim 8, "
           "hidden_size 64]"},
      {"model.layers.0.self_attn.o_proj.weight", at::zeros({64, 16}),
       "expected [64, 64] [hidden_size 64, num_attention_heads 8 * head_dim 8]"},
      {k1, at::zeros({16, 64}, at::kLong), "has dtype Long, expected a floating dtype"},
      {"model.layers.0.self_attn.q_proj.bias", at::zeros({64}),
       "tensor 'model.layers.0.self_attn.q_proj.bias' is present but config.json's "
       "attention_bias is false"},
      {"model.layers.2.self_attn.q_proj.weight", at::zeros({64, 64}),
       "tensor 'model.layers.2.self_attn.q_proj.weight' belongs to layer 2 but "
       "num_hidden_layers is 2"},
  };
  for (const Bad& bad : cases) {
    TensorMap tensors = good;
    if (bad.tensor.defined()) {
      tensors[bad.name] = bad.tensor;
    } else {
      tensors.erase(bad.name);
    }
    auto layers = LlamaLayersFromTensors(config, tensors, "ckpt");
    EXPECT_EQ(layers.status().code(), StatusCode::kInvalidArgument) << bad.message;
    EXPECT_TRUE(Contains(layers.status().message(), bad.message));
  }
  LlamaConfig with_bias = config;
  with_bias.attention_bias = true;
  EXPECT_TRUE(Contains(LlamaLayersFromTensors(with_bias, good, "ckpt").status().message(),
                       "tensor 'model.layers.0.self_attn.q_proj.bias' is missing"));
  LlamaConfig odd = config;
  odd.num_key_value_heads = 3;
  EXPECT_TRUE(Contains(LlamaLayersFromTensors(odd, good, "ckpt").status().message(),
                       "ckpt: num_attention_heads 8 is not a multiple of num_key_value_heads 3"));
}

TEST(LlamaWeights, AttentionTensorNames) {
  EXPECT_EQ(LlamaTensorName(3, "k_proj", "weight"), "model.layers.3.self_attn.k_proj.weight");
  EXPECT_TRUE(IsLlamaAttentionTensor("model.layers.12.self_attn.o_proj.bias"));
  EXPECT_FALSE(IsLlamaAttentionTensor("model.layers.12.self_attn.rotary_emb.inv_freq"));
  EXPECT_FALSE(IsLlamaAttentionTensor("model.layers.1.mlp.gate_proj.weight"));
  EXPECT_FALSE(IsLlamaAttentionTensor("model.layers.x.self_attn.q_proj.weight"));
  EXPECT_FALSE(IsLlamaAttentionTensor("model.layers.1.self_attn.q_proj.weight.extra"));
}

}  // namespace llama_weights_test
}  // namespace mha
