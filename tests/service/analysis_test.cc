// AnalyzeModel through a real mha-server: the reference W^O analysis (and the same of W^Q, W^K,
// W^V) equals the seed's OutputProjectionAnalyzer run by scripts/fixtures/head_reference.py
// (float64, <= 1e-5); unknown models are NOT_FOUND; the answer is cached per version (a second call
// is identical and computes nothing: the server logs each computation, once per version here).
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "heads_util.h"

namespace mha::testing {
namespace analysis_test {

size_t Occurrences(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

void ExpectNear(const google::protobuf::RepeatedField<double>& got, const nlohmann::json& expected,
                const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(got.size()), expected.size()) << what;
  for (int i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], expected[i].get<double>(), 1e-5) << what << "[" << i << "]";
  }
}

void ExpectProjection(const v1::ProjectionAnalysis& got, const nlohmann::json& expected,
                      const std::string& what) {
  ExpectNear(got.head_importance(), expected["head_importance"], what + ".head_importance");
  ExpectNear(got.head_correlation(), expected["head_correlation"], what + ".head_correlation");
  ExpectNear(got.head_effective_rank(), expected["head_effective_rank"],
             what + ".head_effective_rank");
  EXPECT_NEAR(got.effective_rank(), expected["effective_rank"].get<double>(), 1e-5) << what;
  EXPECT_EQ(got.max_rank(), expected["max_rank"].get<int64_t>()) << what;
  EXPECT_EQ(got.head_max_rank(), expected["head_max_rank"].get<int64_t>()) << what;
}

TEST(AnalyzeModel, EqualsTheSeedsOutputProjectionAnalyzer) {
  const nlohmann::json reference = ReadFixtureJson("heads/analysis.json");
  std::vector<std::string> names;
  for (const auto& [name, _] : reference.items()) names.push_back(name);
  SharedServer shared;
  shared.Start(names, "", {"--default-model", names.front()});
  ASSERT_TRUE(shared.error.empty()) << shared.error;
  auto client = shared.Client();
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    const nlohmann::json& expected = reference[name];
    auto analysis = client->AnalyzeModel(name);
    ASSERT_TRUE(analysis.ok()) << analysis.status().ToString();
    EXPECT_EQ(analysis->model(), name);
    EXPECT_EQ(analysis->model_version(), "1");
    EXPECT_EQ(analysis->num_heads() * analysis->head_dim(), analysis->embed_dim());
    ExpectProjection(analysis->output_projection(), expected["output_projection"], "W^O");
    ExpectProjection(analysis->query_projection(), expected["query_projection"], "W^Q");
    ExpectProjection(analysis->key_projection(), expected["key_projection"], "W^K");
    ExpectProjection(analysis->value_projection(), expected["value_projection"], "W^V");
    ExpectNear(analysis->output_dim_contribution(), expected["output_dim_contribution"],
               "output_dim_contribution");
    double sum = 0;
    for (double v : analysis->output_projection().head_importance()) sum += v;
    EXPECT_NEAR(sum, 1.0, 1e-12);
    auto again = client->AnalyzeModel(name, "1");  // cached: the very same numbers
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*analysis, *again));
    // ... not computed again: one computation logged for this version (the log is written, and
    // flushed, before the answer is sent).
    const std::string log = shared.server->log();
    EXPECT_EQ(Occurrences(log, "model " + name + " v1: head analysis computed"), 1u) << log;
  }
  auto unknown = client->AnalyzeModel("nope");
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound) << unknown.status().ToString();
  auto bad_version = client->AnalyzeModel(names.front(), "7");
  EXPECT_EQ(bad_version.status().code(), StatusCode::kNotFound) << bad_version.status().ToString();
  auto by_default = client->AnalyzeModel();
  ASSERT_TRUE(by_default.ok()) << by_default.status().ToString();
  EXPECT_EQ(by_default->model(), names.front());
  shared.Stop();
}

}  // namespace analysis_test
}  // namespace mha::testing
