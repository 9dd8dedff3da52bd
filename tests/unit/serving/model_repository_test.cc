// ModelRepository (repository/model_repository.h): resolving a name and version to a READY entry,
// or the status and words that say why not; version order; the default model; and the folder
// scan that builds entries (versioned and flat layouts, version_policy, a version without
// weights, errors without the repository's absolute path) and the load of one entry.
#include "server/serving/repository/model_repository.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "test_util.h"

namespace mha::serve {
namespace model_repository_test {

namespace fs = std::filesystem;
using testing::Contains;

ModelEntry Entry(const std::string& name, const std::string& version, ModelState state,
                 const std::string& error = "") {
  ModelEntry e;
  e.name = name;
  e.version = version;
  e.state = state;
  e.error = error;
  return e;
}

ModelRepository Mixed() {
  return ModelRepository(
      {Entry("enc", "10", ModelState::kLoading), Entry("enc", "2", ModelState::kReady),
       Entry("dec", "1", ModelState::kFailed, "bad weights"), Entry("enc", "1", ModelState::kReady),
       Entry("dec", "2", ModelState::kUnloading)},
      "enc");
}

TEST(ModelRepositoryTest, ResolvesTheNewestReadyVersionOrSaysWhyNot) {
  const ModelRepository repo = Mixed();
  auto newest = repo.Resolve("");  // the default model, its newest READY version
  ASSERT_TRUE(newest.ok()) << newest.status().ToString();
  EXPECT_EQ((*newest)->name, "enc");
  EXPECT_EQ((*newest)->version, "2");
  EXPECT_EQ(repo.Resolve("enc", "1").value()->version, "1");
  const std::vector<std::tuple<std::string, std::string, StatusCode, std::string>> refused = {
      {"enc", "10", StatusCode::kUnavailable, "model 'enc' version 10 is still loading"},
      {"dec", "2", StatusCode::kUnavailable, "model 'dec' version 2 is unloading"},
      {"dec", "", StatusCode::kUnavailable, "model 'dec' version 2 is unloading"},
      {"dec", "1", StatusCode::kFailedPrecondition, "version 1 failed to load: bad weights"},
      {"enc", "3", StatusCode::kNotFound,
       "model 'enc' has no version '3' (model_version); versions: 1 READY, 2 READY, 10 LOADING"},
      {"nope", "", StatusCode::kNotFound, "model 'nope' not found; available: dec, enc"}};
  for (const auto& [name, version, code, words] : refused) {
    auto r = repo.Resolve(name, version);
    ASSERT_FALSE(r.ok()) << name << " " << version;
    EXPECT_EQ(r.status().code(), code) << r.status().ToString();
    EXPECT_TRUE(Contains(r.status().message(), words));
  }
}

TEST(ModelRepositoryTest, VersionsCountsAndNames) {
  const ModelRepository repo = Mixed();
  std::vector<std::string> versions;
  for (const auto& e : repo.Versions("enc")) versions.push_back(e->version);
  EXPECT_EQ(versions, (std::vector<std::string>{"1", "2", "10"}));  // numerically
  EXPECT_TRUE(repo.Versions("nope").empty());
  EXPECT_EQ(repo.ready_count(), 1u);
  EXPECT_EQ(repo.model_count(), 2u);
  EXPECT_EQ(repo.NameList(), "dec, enc");
  EXPECT_EQ(repo.Find("nope"), nullptr);
  EXPECT_EQ(repo.Find("dec")->version, "2");  // no READY one: the newest that did not fail
  EXPECT_EQ(ModelRepository(std::vector<ModelEntry>(), "").NameList(), "(none)");
  // A version reloading beside itself: Find prefers the READY entry.
  const ModelRepository reloading(
      {Entry("enc", "1", ModelState::kReady), Entry("enc", "1", ModelState::kLoading)}, "");
  EXPECT_EQ(reloading.Find("enc", "1")->state, ModelState::kReady);
}

// Ready() is what health SERVING, ServerReady and /v2/health/ready mean without the app's state:
// nothing is still loading, and one model is READY.
TEST(ModelRepositoryTest, ReadyWhenNothingLoadsAndOneModelIsReady) {
  EXPECT_FALSE(Mixed().Ready()) << "enc 10 is still loading";
  EXPECT_TRUE(ModelRepository({Entry("enc", "1", ModelState::kReady),
                               Entry("dec", "1", ModelState::kFailed, "bad")},
                              "")
                  .Ready());
  EXPECT_FALSE(ModelRepository({Entry("dec", "1", ModelState::kFailed, "bad")}, "").Ready())
      << "no READY model";
  EXPECT_FALSE(ModelRepository(std::vector<ModelEntry>(), "").Ready());
}

TEST(ModelRepositoryTest, WithoutADefaultModelRequestsMustNameOne) {
  const ModelRepository repo(
      {Entry("a", "1", ModelState::kReady), Entry("b", "1", ModelState::kReady)}, "");
  auto unnamed = repo.Resolve("");
  ASSERT_FALSE(unnamed.ok());
  EXPECT_EQ(unnamed.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(
      Contains(unnamed.status().message(), "no default model: this server has 2 models (a, b)"));
  EXPECT_TRUE(Contains(unnamed.status().message(), "--default-model"));
  EXPECT_TRUE(repo.Resolve("b").ok());
}

TEST(ModelRepositoryTest, VersionOrderAndDefaultModel) {
  EXPECT_TRUE(VersionLess("9", "10"));
  EXPECT_FALSE(VersionLess("10", "9"));
  EXPECT_TRUE(VersionLess("10", "a"));  // numeric labels first
  EXPECT_TRUE(VersionLess("a", "b"));
  EXPECT_FALSE(VersionLess("2", "2"));
  const std::vector<ModelEntry> two = {Entry("a", "1", ModelState::kLoading),
                                       Entry("b", "1", ModelState::kLoading),
                                       Entry("b", "2", ModelState::kLoading)};
  EXPECT_EQ(PickDefaultModel(two, "b").value(), "b");
  EXPECT_EQ(PickDefaultModel(two, "").value(), "");
  EXPECT_EQ(PickDefaultModel({two[1], two[2]}, "").value(), "b");  // the only model
  auto unknown = PickDefaultModel(two, "c");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(unknown.status().message(),
                       "--default-model 'c' is not in the repository (models: a, b)"));
}

// A repository folder on disk: `enc` versioned (1, 2, 3; latest 2 served), `flat` without version
// folders (its config.json names the version), `empty` without weights.
class RepositoryFolder {
 public:
  RepositoryFolder() {
    for (const char* v : {"1", "2", "3"}) Weights(root() / "enc" / v);
    Write(root() / "enc" / "config.json",
          R"({"num_heads": 4, "version_policy": {"latest": {"num_versions": 2}}})");
    Weights(root() / "flat");
    Write(root() / "flat" / "config.json", R"({"num_heads": 4, "version": 7})");
    fs::create_directories(root() / "empty");
    Write(root() / "empty" / "config.json", R"({"num_heads": 4})");
    fs::create_directories(root() / ".hidden");
    Write(root() / "README", "not a model");
  }
  fs::path root() const { return dir_.path(); }

 private:
  static void Weights(const fs::path& dir) {
    fs::create_directories(dir);
    fs::copy_file(testing::FixturePath("cases/self_basic/model.safetensors"),
                  dir / "model.safetensors");
  }
  static void Write(const fs::path& path, const std::string& text) {
    std::ofstream(path.string()) << text;
  }
  testing::TempDir dir_;
};

TEST(ModelRepositoryTest, ScanFollowsTheLayoutAndTheVersionPolicy) {
  RepositoryFolder folder;
  const std::string root = folder.root().string();
  EXPECT_EQ(ListModelFolders(root).value(), (std::vector<std::string>{"empty", "enc", "flat"}));
  auto entries = ScanRepository(root);
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  std::vector<std::string> seen;
  for (const auto& e : *entries)
    seen.push_back(e.name + "/" + e.version + " " + ModelStateName(e.state));
  EXPECT_EQ(seen, (std::vector<std::string>{"empty/1 FAILED", "enc/2 LOADING", "enc/3 LOADING",
                                            "flat/7 LOADING"}));
  const ModelEntry& empty = (*entries)[0];
  EXPECT_TRUE(Contains(empty.error, "no weights file"));
  EXPECT_FALSE(Contains(empty.error, root)) << "errors name paths relative to the repository";
  const ModelEntry& enc3 = (*entries)[2];
  EXPECT_EQ(enc3.source, "enc/3/model.safetensors");
  EXPECT_EQ(enc3.fingerprint.size(), 16u);
  EXPECT_EQ(ScanModel(root, "enc").size(), 2u);
  EXPECT_EQ(ScanRepository(root + "/empty/missing").status().code(), StatusCode::kNotFound);
  testing::TempDir nothing;
  auto none = ScanRepository(nothing.path());
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(Contains(none.status().message(), "holds no model folder"));
}

TEST(ModelRepositoryTest, LoadingAnEntryMakesItReadyOrFailed) {
  RepositoryFolder folder;
  std::vector<ModelEntry> enc = ScanModel(folder.root().string(), "enc");
  ASSERT_EQ(enc.size(), 2u);
  LoadModelEntry(LoadOverrides(), &enc[1]);
  ASSERT_EQ(enc[1].state, ModelState::kReady) << enc[1].error;
  ASSERT_NE(enc[1].servable, nullptr);
  EXPECT_EQ(enc[1].info.options.embed_dim, 16);
  EXPECT_EQ(enc[1].format, "safetensors");
  std::ofstream((folder.root() / "enc" / "2" / "model.safetensors").string()) << "not weights";
  LoadModelEntry(LoadOverrides(), &enc[0]);
  EXPECT_EQ(enc[0].state, ModelState::kFailed);
  EXPECT_EQ(enc[0].servable, nullptr);
  EXPECT_FALSE(enc[0].error.empty());
}

}  // namespace model_repository_test
}  // namespace mha::serve
