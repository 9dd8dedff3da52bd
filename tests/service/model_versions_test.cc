// Versioned model repositories (Triton's layout), version policies and routing by
// ForwardRequest.model_version, against a real server.
#include <gtest/gtest.h>

#include "lifecycle_util.h"

namespace mha::testing {
namespace model_versions_test {

std::map<std::string, v1::ModelInfo> VersionsOf(client::TensorClient& client,
                                                const std::string& model) {
  std::map<std::string, v1::ModelInfo> versions;
  auto list = client.ListModels();
  EXPECT_TRUE(list.ok()) << list.status().ToString();
  if (!list.ok()) return versions;
  for (const auto& m : list->models()) {
    if (m.name() == model) versions[m.version()] = m;
  }
  return versions;
}

v1::ForwardRequest VersionRequest(const std::string& model, const std::string& version) {
  v1::ForwardRequest r = SelfAttentionRequest(model, 1, 4, 16);
  r.set_model_version(version);
  return r;
}

TEST(ModelVersions, NewestVersionAnswersByDefaultAndModelVersionPicksOne) {
  TempDir repo;
  WriteText(repo.File("m/config.json"), R"({"num_heads": 4, "version_policy": {"all": {}}})");
  AddVersion(repo.path(), "m", "1", "self_basic");
  AddVersion(repo.path(), "m", "2", "causal");
  AddVersion(repo.path(), "m", "10", "self_basic");  // numeric order: 10 is the newest
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--model-repository", repo.path()}));
  client::TensorClient client({server.target(), std::chrono::seconds(60)});
  auto versions = VersionsOf(client, "m");
  ASSERT_EQ(versions.size(), 3u);
  for (const char* v : {"1", "2", "10"}) EXPECT_EQ(versions[v].state(), v1::READY) << v;
  EXPECT_EQ(versions["2"].source(), "m/2/model.safetensors");

  auto newest = client.ForwardRaw(VersionRequest("m", ""));
  ASSERT_TRUE(newest.ok()) << newest.status().ToString();
  EXPECT_EQ(newest->model_version(), "10");
  for (const char* v : {"1", "2", "10"}) {
    auto answer = client.ForwardRaw(VersionRequest("m", v));
    ASSERT_TRUE(answer.ok()) << v << ": " << answer.status().ToString();
    EXPECT_EQ(answer->model_version(), v);
  }
  auto one = client.ForwardRaw(VersionRequest("m", "1"));
  auto two = client.ForwardRaw(VersionRequest("m", "2"));
  ASSERT_TRUE(one.ok() && two.ok());
  EXPECT_NE(one->output().data(), two->output().data()) << "v1 and v2 hold different weights";

  auto missing = client.ForwardRaw(VersionRequest("m", "7"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  for (const char* part : {"version '7'", "model_version", "1 READY", "10 READY"}) {
    EXPECT_NE(missing.status().message().find(part), std::string::npos)
        << missing.status().message();
  }
  auto info = client.GetModel("m");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->version(), "10");
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

TEST(ModelVersions, PoliciesSelectTheServedVersions) {
  TempDir repo;
  WriteText(repo.File("latest/config.json"), R"({"num_heads": 4})");  // default: latest 1
  WriteText(repo.File("two/config.json"),
            R"({"num_heads": 4, "version_policy": {"latest": {"num_versions": 2}}})");
  WriteText(repo.File("pick/config.json"),
            R"({"num_heads": 4, "version_policy": {"specific": {"versions": [3, 1, 9]}}})");
  for (const char* model : {"latest", "two", "pick"}) {
    for (const char* v : {"1", "2", "3"}) AddVersion(repo.path(), model, v, "self_basic");
  }
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--model-repository", repo.path()}));
  client::TensorClient client({server.target(), std::chrono::seconds(60)});
  auto keys = [&](const std::string& model) {
    std::string list;
    for (const auto& [version, info] : VersionsOf(client, model)) list += version + ",";
    return list;
  };
  EXPECT_EQ(keys("latest"), "3,");
  EXPECT_EQ(keys("two"), "2,3,");
  EXPECT_EQ(keys("pick"), "1,3,");
  auto unserved = client.ForwardRaw(VersionRequest("latest", "1"));
  ASSERT_FALSE(unserved.ok());
  EXPECT_EQ(unserved.status().code(), StatusCode::kNotFound) << unserved.status().ToString();
  auto picked = client.ForwardRaw(VersionRequest("pick", "1"));
  ASSERT_TRUE(picked.ok()) << picked.status().ToString();
  EXPECT_EQ(picked->model_version(), "1");
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

TEST(ModelVersions, AVersionConfigOverridesTheModelsAndABadOneFailsOnlyThatVersion) {
  TempDir repo;
  WriteText(repo.File("m/config.json"), R"({"num_heads": 4, "version_policy": {"all": {}}})");
  AddVersion(repo.path(), "m", "1", "self_basic");
  AddVersion(repo.path(), "m", "2", "self_basic");
  WriteText(repo.File("m/2/config.json"), R"({"num_heads": 3})");  // E=16 is not divisible by 3
  AddVersion(repo.path(), "m", "3", "self_basic");
  WriteText(repo.File("m/3/config.json"), R"({"max_queue_size": "many"})");
  WriteText(repo.File("bad/config.json"), R"({"num_heads": 4, "version_policy": {"newest": {}}})");
  AddVersion(repo.path(), "bad", "1", "self_basic");
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--model-repository", repo.path()}));
  client::TensorClient client({server.target(), std::chrono::seconds(60)});
  auto versions = VersionsOf(client, "m");
  ASSERT_EQ(versions.size(), 3u);
  EXPECT_EQ(versions["1"].state(), v1::READY);
  EXPECT_EQ(versions["2"].state(), v1::FAILED);
  EXPECT_NE(versions["2"].error().find("num_heads"), std::string::npos) << versions["2"].error();
  EXPECT_EQ(versions["3"].state(), v1::FAILED);
  EXPECT_NE(versions["3"].error().find("m/3/config.json: 'max_queue_size'"), std::string::npos)
      << versions["3"].error();
  auto answer = client.ForwardRaw(VersionRequest("m", ""));  // the newest READY one
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  EXPECT_EQ(answer->model_version(), "1");
  auto failed = client.ForwardRaw(VersionRequest("m", "2"));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(failed.status().message().find("version 2 failed to load"), std::string::npos)
      << failed.status().message();
  auto bad = VersionsOf(client, "bad");
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad.begin()->second.state(), v1::FAILED);
  EXPECT_NE(bad.begin()->second.error().find("bad/config.json: 'version_policy' must be latest, "
                                             "all or specific, got 'newest'"),
            std::string::npos)
      << bad.begin()->second.error();
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

TEST(ModelVersions, FlatLayoutIsVersionOne) {
  ModelRepositoryDir repository({"self_basic"});
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--model-repository", repository.path()}));
  client::TensorClient client({server.target(), std::chrono::seconds(60)});
  auto versions = VersionsOf(client, "self_basic");
  ASSERT_EQ(versions.size(), 1u);
  EXPECT_EQ(versions.begin()->first, "1");
  auto answer = client.ForwardRaw(VersionRequest("self_basic", "1"));
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  EXPECT_EQ(answer->model_version(), "1");
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

TEST(ModelVersions, WarmupRunsBeforeReadyAndABadKeyOrAFailingPassFailsTheVersion) {
  TempDir repo;
  WriteText(
      repo.File("w/config.json"),
      R"({"num_heads": 4, "warmup": [{"batch": 2, "seq": 8}, {"seq": 3, "need_weights": true}]})");
  AddVersion(repo.path(), "w", "1", "self_basic");
  WriteText(repo.File("x/config.json"), R"({"num_heads": 4, "warmup": [{"batch": 0}]})");
  AddVersion(repo.path(), "x", "1", "self_basic");
  WriteText(repo.File("y/config.json"), R"({"num_heads": 4, "warmup": [{"batch": 1, "sq": 4}]})");
  AddVersion(repo.path(), "y", "1", "self_basic");
  // A valid warmup that this model cannot run: warmup passes are self-attention, and kdim/vdim
  // differ from embed_dim here. The pass fails, and so does the version.
  WriteText(repo.File("z/config.json"), R"({"num_heads": 4, "warmup": [{"batch": 1, "seq": 4}]})");
  AddVersion(repo.path(), "z", "1", "kdim_vdim");
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--model-repository", repo.path()}));
  client::TensorClient client({server.target(), std::chrono::seconds(60)});
  EXPECT_EQ(VersionsOf(client, "w")["1"].state(), v1::READY);
  EXPECT_NE(server.log().find("model w v1 warmup: 2 passes"), std::string::npos) << server.log();
  const std::string x = VersionsOf(client, "x")["1"].error();
  EXPECT_NE(x.find("x/config.json warmup[0]: 'batch' must be an integer in [1, 4096], got 0"),
            std::string::npos)
      << x;
  const std::string y = VersionsOf(client, "y")["1"].error();
  EXPECT_NE(y.find("y/config.json warmup[0]: unknown key 'sq'"), std::string::npos) << y;
  const v1::ModelInfo z = VersionsOf(client, "z")["1"];
  EXPECT_EQ(z.state(), v1::FAILED);
  EXPECT_NE(z.error().find("warmup[0] (batch 1, seq 4) failed: INVALID_ARGUMENT"),
            std::string::npos)
      << z.error();
  EXPECT_EQ(VersionsOf(client, "w")["1"].state(), v1::READY);  // the others still serve
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

TEST(ModelVersions, StatisticsEqualTheRequestsSent) {
  TempDir repo;
  WriteText(repo.File("m/config.json"), R"({"num_heads": 4, "version_policy": {"all": {}}})");
  AddVersion(repo.path(), "m", "1", "self_basic");
  AddVersion(repo.path(), "m", "2", "causal");
  ServerProcess server;
  ASSERT_TRUE(server.Start({"--model-repository", repo.path(), "--batching", "off"}));
  client::TensorClient client({server.target(), std::chrono::seconds(60)});
  const auto since_epoch_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  const int64_t t0 = since_epoch_ms();
  for (int i = 0; i < 5; ++i) {
    v1::ForwardRequest r = SelfAttentionRequest("m", 2, 4, 16);
    r.set_model_version("1");
    ASSERT_TRUE(client.ForwardRaw(r).ok());
  }
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(client.ForwardRaw(VersionRequest("m", "")).ok());
  v1::ForwardRequest bad = SelfAttentionRequest("m", 1, 4, 8);  // E=8 for an E=16 model
  bad.set_model_version("1");
  EXPECT_EQ(client.ForwardRaw(bad).status().code(), StatusCode::kInvalidArgument);
  const int64_t t1 = since_epoch_ms();

  auto stats = client.GetModelStatistics("m");
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  ASSERT_EQ(stats->models_size(), 2);
  const v1::ModelStatistics& one = stats->models(0);
  EXPECT_EQ(one.version(), "1");
  EXPECT_EQ(one.success_count(), 5);
  EXPECT_EQ(one.failure_count(), 1);
  EXPECT_EQ(one.inference_count(), 10);  // 5 requests of B=2
  EXPECT_EQ(one.execution_count(), 5);   // batching off: one pass each
  EXPECT_GT(one.compute_ns(), 0);
  EXPECT_GE(one.last_inference_ms(), t0);
  EXPECT_LE(one.last_inference_ms(), t1);
  const v1::ModelStatistics& two = stats->models(1);
  EXPECT_EQ(two.version(), "2");
  EXPECT_EQ(two.success_count(), 3);
  EXPECT_EQ(two.failure_count(), 0);
  EXPECT_EQ(two.inference_count(), 3);
  EXPECT_EQ(two.execution_count(), 3);

  auto only = client.GetModelStatistics("m", "2");
  ASSERT_TRUE(only.ok());
  ASSERT_EQ(only->models_size(), 1);
  EXPECT_EQ(only->models(0).success_count(), 3);
  auto missing = client.GetModelStatistics("m", "7");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status().ToString();
  auto unknown = client.GetModelStatistics("zzz");
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound) << unknown.status().ToString();
  EXPECT_EQ(server.Stop(), 0) << server.log();
}

}  // namespace model_versions_test
}  // namespace mha::testing
