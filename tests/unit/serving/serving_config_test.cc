// The serving part of config.json (serving_config.h): the lifecycle keys (version_policy,
// warmup), the KV cache dtype, and layered config files (a version folder's over its model's),
// without a server.
#include "server/serving/repository/serving_config.h"

#include <gtest/gtest.h>

#include <fstream>

#include "test_util.h"

namespace mha::testing {
namespace serving_config_test {

using serve::ReadLayeredServingConfig;
using serve::ReadServingConfig;

std::string Write(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.path() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ServingConfigTest, VersionPolicies) {
  TempDir dir;
  auto none = ReadServingConfig(Write(dir, "a.json", R"({"num_heads": 4})"));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->version_policy.kind, serve::VersionPolicy::Kind::kLatest);
  EXPECT_EQ(none->version_policy.num_versions, 1);
  auto latest = ReadServingConfig(
      Write(dir, "b.json", R"({"version_policy": {"latest": {"num_versions": 3}}})"));
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(latest->version_policy.num_versions, 3);
  auto all = ReadServingConfig(Write(dir, "c.json", R"({"version_policy": {"all": {}}})"));
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->version_policy.kind, serve::VersionPolicy::Kind::kAll);
  auto specific = ReadServingConfig(
      Write(dir, "d.json", R"({"version_policy": {"specific": {"versions": [4, 1, 4]}}})"));
  ASSERT_TRUE(specific.ok());
  EXPECT_EQ(specific->version_policy.kind, serve::VersionPolicy::Kind::kSpecific);
  EXPECT_EQ(specific->version_policy.versions, (std::vector<int64_t>{1, 4}));
}

TEST(ServingConfigTest, BadPoliciesAndWarmupsNameTheFileAndKey) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"version_policy": "latest"})", "'version_policy' must be an object with one key"},
      {R"({"version_policy": {"latest": {}, "all": {}}})", "must be an object with one key"},
      {R"({"version_policy": {"newest": {}}})", "must be latest, all or specific, got 'newest'"},
      {R"({"version_policy": {"latest": {"num_versions": 0}}})", "'num_versions' must be"},
      {R"({"version_policy": {"specific": {"versions": []}}})", "non-empty array"},
      {R"({"version_policy": {"specific": {"versions": [0]}}})", "integers >= 1, got 0"},
      {R"({"warmup": {"batch": 1}})", "'warmup' must be an array"},
      {R"({"warmup": [3]})", "warmup[0] must be an object"},
      {R"({"warmup": [{"batch": 1}, {"seq": 0}]})", "warmup[1]: 'seq' must be an integer"},
      {R"({"warmup": [{"need_weights": 1}]})", "warmup[0]: 'need_weights' must be a boolean"},
      {R"({"warmup": [{"batch": 1, "sq": 4}]})", "warmup[0]: unknown key 'sq'"}};
  for (const auto& [json, words] : cases) {
    const std::string path = Write(dir, "config.json", json);
    auto config = ReadServingConfig(path);
    ASSERT_FALSE(config.ok()) << json;
    EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument) << json;
    EXPECT_NE(config.status().message().find(path), std::string::npos) << config.status().message();
    EXPECT_NE(config.status().message().find(words), std::string::npos)
        << json << " -> " << config.status().message();
  }
}

TEST(ServingConfigTest, KvCacheDtypeIsReadAndABadOneNamesTheKeyAndTheChoices) {
  TempDir dir;
  auto none = ReadServingConfig(Write(dir, "a.json", R"({"num_heads": 4})"));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->kv_cache_dtype.has_value()) << "absent: the server's --kv-cache-dtype";
  auto int8 = ReadServingConfig(Write(dir, "b.json", R"({"kv_cache_dtype": "int8"})"));
  ASSERT_TRUE(int8.ok()) << int8.status().ToString();
  EXPECT_EQ(int8->kv_cache_dtype, KvCacheDtype::kInt8);
  EXPECT_TRUE(int8->unknown_keys.empty());
  for (const auto& [json, words] : std::vector<std::pair<std::string, std::string>>{
           {R"({"kv_cache_dtype": "int4"})",
            "'kv_cache_dtype': unknown KV cache dtype 'int4' (choices: model, fp32, bf16, fp16, "
            "int8, fp8_e4m3)"},
           {R"({"kv_cache_dtype": 8})",
            "'kv_cache_dtype' must be a string (model, fp32, bf16, fp16, int8, fp8_e4m3), got "
            "8"}}) {
    const std::string path = Write(dir, "config.json", json);
    auto config = ReadServingConfig(path);
    ASSERT_FALSE(config.ok()) << json;
    EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(config.status().message(), path + ": " + words);
  }
}

TEST(ServingConfigTest, WarmupShapes) {
  TempDir dir;
  auto config = ReadServingConfig(
      Write(dir, "config.json", R"({"warmup": [{"batch": 2, "seq": 8}, {"need_weights": true}]})"));
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_EQ(config->warmup.size(), 2u);
  EXPECT_EQ(config->warmup[0].batch, 2);
  EXPECT_EQ(config->warmup[0].seq, 8);
  EXPECT_FALSE(config->warmup[0].need_weights);
  EXPECT_EQ(config->warmup[1].batch, 1);  // defaults
  EXPECT_EQ(config->warmup[1].seq, 16);
  EXPECT_TRUE(config->warmup[1].need_weights);
}

TEST(ServingConfigTest, AVersionFileOverridesTheModelsKeyByKey) {
  TempDir dir;
  const std::string model = Write(dir, "model.json", R"({"num_heads": 4, "max_queue_size": 9})");
  const std::string version = Write(dir, "version.json", R"({"max_queue_size": 3})");
  auto config = ReadLayeredServingConfig({model, version});
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->model.num_heads, 4);
  EXPECT_EQ(config->max_queue_size, 3);
  const std::string bad = Write(dir, "bad.json", R"({"instances": 0})");
  auto failed = ReadLayeredServingConfig({model, bad});
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find(bad + ": 'instances'"), std::string::npos)
      << failed.status().message();
}

}  // namespace serving_config_test
}  // namespace mha::testing
