// LlamaConfig (mha/llama_config.h): Hugging Face config.json keys, their defaults, and refusals
// that name the file, the key and the numbers.
#include "mha/llama_config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "llama_test_util.h"
#include "test_util.h"

namespace mha {
namespace llama_config_test {

using testing::Contains;

// The minimal valid config plus `extra` keys (null values remove a key).
nlohmann::json Config(const nlohmann::json& extra = nlohmann::json::object()) {
  nlohmann::json c = {{"hidden_size", 32}, {"num_attention_heads", 8}, {"num_hidden_layers", 2}};
  for (const auto& [key, value] : extra.items()) {
    if (value.is_null()) {
      c.erase(key);
    } else {
      c[key] = value;
    }
  }
  return c;
}

Status ErrorOf(const nlohmann::json& json) {
  auto config = LlamaConfigFromJson(json, "m/config.json");
  return config.ok() ? Status::Ok() : config.status();
}

TEST(LlamaConfig, DefaultsAreHuggingFaces) {
  auto c = LlamaConfigFromJson(Config(), "m/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->hidden_size, 32);
  EXPECT_EQ(c->num_attention_heads, 8);
  EXPECT_EQ(c->num_key_value_heads, 8);  // absent: H
  EXPECT_EQ(c->head_dim, 4);             // absent: E / H
  EXPECT_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->max_position_embeddings, 2048);
  EXPECT_EQ(c->max_positions(), 2048);
  EXPECT_EQ(c->num_hidden_layers, 2);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->group_size(), 1);
}

TEST(LlamaConfig, FixtureConfigsRead) {
  auto gqa = ReadLlamaConfig(testing::FixturePath("llama/gqa_ratio4/config.json"));
  ASSERT_TRUE(gqa.ok()) << gqa.status().ToString();  // with model_type, rope_scaling null, ...
  EXPECT_EQ(gqa->num_key_value_heads, 2);
  EXPECT_EQ(gqa->group_size(), 4);
  EXPECT_EQ(gqa->rope_theta, 500000.0);
  EXPECT_EQ(gqa->max_position_embeddings, 128);
  auto bias = ReadLlamaConfig(testing::FixturePath("llama/bias_head_dim/config.json"));
  ASSERT_TRUE(bias.ok()) << bias.status().ToString();
  EXPECT_TRUE(bias->attention_bias);
  EXPECT_EQ(bias->head_dim, 8);  // given: H * D = 32 != E = 24
  EXPECT_EQ(bias->q_dim(), 32);
  EXPECT_EQ(bias->kv_dim(), 16);
  EXPECT_EQ(ReadLlamaConfig("/nonexistent/config.json").status().code(), StatusCode::kNotFound);
}

TEST(LlamaConfig, RuleViolationsNameTheFieldsAndNumbers) {
  const std::pair<nlohmann::json, std::string> cases[] = {
      {Config({{"num_key_value_heads", 3}}),
       "m/config.json: num_attention_heads 8 is not a multiple of num_key_value_heads 3"},
      {Config({{"num_key_value_heads", 16}}),
       "m/config.json: num_key_value_heads 16 exceeds num_attention_heads 8"},
      {Config({{"hidden_size", 30}}),
       "m/config.json: hidden_size 30 is not a multiple of num_attention_heads 8 and no head_dim "
       "is given"},
      {Config({{"head_dim", 5}}), "m/config.json: head_dim 5 must be even (RoPE rotates"},
      {Config({{"hidden_size", nullptr}}), "m/config.json: 'hidden_size' is required"},
      {Config({{"num_hidden_layers", nullptr}}), "'num_hidden_layers' is required"},
      {Config({{"num_hidden_layers", 0}}),
       "m/config.json: 'num_hidden_layers' must be an integer in [1, 4294967296], got 0"},
      {Config({{"num_key_value_heads", "2"}}), "'num_key_value_heads' must be an integer"},
      {Config({{"rope_theta", -1.0}}), "m/config.json: 'rope_theta' must be a number in ["},
      {Config({{"rope_theta", "big"}}), "'rope_theta' must be a number in [1e-30, 1e+300], got"},
      {Config({{"attention_bias", 1}}), "'attention_bias' must be a boolean, got 1"},
      {Config({{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}}),
       "m/config.json: 'rope_scaling' is not supported (got an object of 2 keys)"},
      {Config({{"rope_parameters", {{"rope_type", "yarn"}}}}),
       "m/config.json: rope_parameters: rope_type 'yarn' is not supported"},
  };
  for (const auto& [json, message] : cases) {
    const Status s = ErrorOf(json);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << json.dump();
    EXPECT_TRUE(Contains(s.message(), message)) << json.dump();
  }
  EXPECT_TRUE(Contains(ErrorOf(nlohmann::json::array()).message(), "is not a JSON object"));
}

TEST(LlamaConfig, RopeParametersAndSlidingWindow) {
  auto v5 = LlamaConfigFromJson(
      Config({{"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e6}}}}), "c");
  ASSERT_TRUE(v5.ok()) << v5.status().ToString();
  EXPECT_EQ(v5->rope_theta, 1e6);  // transformers 5 moved rope_theta there
  auto mistral =
      LlamaConfigFromJson(Config({{"sliding_window", 16}, {"max_position_embeddings", 128}}), "c");
  ASSERT_TRUE(mistral.ok()) << mistral.status().ToString();
  EXPECT_EQ(mistral->max_positions(), 16);  // within the window, windowed == full attention
  auto off = LlamaConfigFromJson(Config({{"sliding_window", 16},
                                         {"use_sliding_window", false},
                                         {"max_position_embeddings", 128}}),
                                 "c");
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(off->max_positions(), 128);
  nlohmann::json null_window = Config();
  null_window["sliding_window"] = nullptr;
  ASSERT_TRUE(LlamaConfigFromJson(null_window, "c").ok());
}

TEST(LlamaConfig, KvBytesPerTokenOfGqaAreAQuarterOfMha) {
  // docs/afd.md's KV sizing row: E=1024, H=16; KV=4 vs KV=16 at the same E, float32.
  auto gqa = LlamaConfigFromJson(
      Config({{"hidden_size", 1024}, {"num_attention_heads", 16}, {"num_key_value_heads", 4}}),
      "c");
  auto mha = LlamaConfigFromJson(Config({{"hidden_size", 1024}, {"num_attention_heads", 16}}), "c");
  ASSERT_TRUE(gqa.ok() && mha.ok());
  EXPECT_EQ(gqa->kv_bytes_per_token(4), 2 * 4 * 64 * 4);  // 2048 bytes per token per layer
  EXPECT_EQ(mha->kv_bytes_per_token(4), 2 * 1024 * 4);    // 8192: nn.MultiheadAttention's
  EXPECT_EQ(4 * gqa->kv_bytes_per_token(4), mha->kv_bytes_per_token(4));
}

TEST(LlamaConfig, TellsALlamaConfigFromAnMhaOne) {
  EXPECT_TRUE(IsLlamaConfig(Config()));
  EXPECT_FALSE(IsLlamaConfig(nlohmann::json{{"num_heads", 4}}));
  EXPECT_FALSE(IsLlamaConfig(nlohmann::json::array()));
}

}  // namespace llama_config_test
}  // namespace mha
