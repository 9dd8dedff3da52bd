// `mha-client decode`'s load generator (client/decode_bench.h) against a real mha-server: every
// step it reports was answered, the server's KV cache accounting it reports at CloseSession is
// the one the block size implies, the sessions are closed afterwards, `--stream` steps go over
// ForwardStream (the server's log names the method), every step's latency and time is kept with
// session 0's last per-head weights (what --plot draws), and a refused step is reported, not
// counted.
#include "client/bench/decode_bench.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "session_test_util.h"

namespace mha::testing {
namespace decode_bench_test {

// Steps the server logged as answered (debug) or failed (warn) through `method`.
int CountLogged(const std::string& log, const std::string& method, const std::string& outcome) {
  const std::string needle = method + " " + outcome + " ";
  int n = 0;
  for (size_t at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1)) {
    if (at == 0 || log[at - 1] == ' ' || log[at - 1] == ']') ++n;
  }
  return n;
}

client::DecodeBenchOptions Options(bool stream) {
  client::DecodeBenchOptions o;
  o.model = "decode_causal";
  o.sessions = 3;
  o.tokens = 5;
  o.prefill = 2;
  o.batch = 2;
  o.stream = stream;
  return o;
}

class DecodeBench : public ::testing::TestWithParam<bool> {};

TEST_P(DecodeBench, ReportsEveryStepAndTheCacheTheBlocksImply) {
  OwnServer s;
  ASSERT_TRUE(s.Start({"--log-level", "debug"}));  // --kv-block-tokens 4
  auto client = s.Client();
  const client::DecodeBenchOptions o = Options(GetParam());
  auto report = client::RunDecodeBench(*client, o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->errors, 0) << report->first_error;
  EXPECT_EQ(report->steps, 3 * 5);
  auto info = client->GetModel("decode_causal");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(report->embed_dim, info->embed_dim());
  // 3 sessions x 2 rows x (2 + 5) tokens, in blocks of 4: 2 blocks a row.
  EXPECT_EQ(report->cached_tokens, 3 * 2 * 7);
  EXPECT_EQ(report->kv_block_tokens, 4);
  EXPECT_EQ(report->kv_blocks, 3 * 2 * 2);
  EXPECT_GT(report->steps_per_s, 0);
  EXPECT_LE(report->latency.p50_us, report->latency.p99_us);
  EXPECT_LE(report->latency.p99_us, report->latency.max_us);
  EXPECT_GT(s.Metric("mha_kv_cache_blocks_total"), 0);  // the series exist: 0 below is read
  EXPECT_EQ(s.Metric("mha_sessions_open"), 0);
  EXPECT_EQ(s.Metric("mha_kv_cache_blocks_used"), 0);
  // Each session's prefill + 5 steps through the method asked for: 6 Forward calls, or one
  // ForwardStream that answered 6 messages.
  const std::string log = s.server.log();
  if (GetParam()) {
    EXPECT_EQ(CountLogged(log, "ForwardStream", "ok"), 3) << log;
    EXPECT_EQ(CountLogged(log, "Forward", "ok"), 0) << log;
    int answered = 0;
    for (size_t at = log.find(" answers=6\n"); at != std::string::npos;
         at = log.find(" answers=6\n", at + 1)) {
      ++answered;
    }
    EXPECT_EQ(answered, 3) << log;
  } else {
    EXPECT_EQ(CountLogged(log, "Forward", "ok"), 3 * 6) << log;
    EXPECT_EQ(CountLogged(log, "ForwardStream", "ok"), 0) << log;
  }
  const std::string text = client::DecodeBenchReportText(o, *report);
  EXPECT_NE(text.find("steps: 15 ok, 0 errors"), std::string::npos) << text;
  EXPECT_NE(text.find("12 blocks x 4 tokens for 42 tokens cached"), std::string::npos) << text;
}

TEST_P(DecodeBench, KeepsEveryStepsSampleAndSessionZerosLastWeights) {
  OwnServer s;
  ASSERT_TRUE(s.Start({}));
  client::DecodeBenchOptions o = Options(GetParam());
  o.need_weights = true;
  o.per_head = true;
  auto report = client::RunDecodeBench(*s.Client(), o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->errors, 0) << report->first_error;
  ASSERT_EQ(report->sample_latency_us.size(), 3u * 5u);
  ASSERT_EQ(report->sample_done_s.size(), 3u * 5u);
  double largest = 0;
  for (size_t i = 0; i < report->sample_done_s.size(); ++i) {
    EXPECT_GT(report->sample_done_s[i], 0.0);
    EXPECT_LE(report->sample_done_s[i], report->seconds);
    largest = std::max(largest, report->sample_latency_us[i]);
  }
  EXPECT_EQ(largest, report->latency.max_us);
  // Session 0's last step, per head: [B=2, H, 1, prefill 2 + 5 tokens], each row a distribution.
  const v1::Tensor& w = report->last_step_weights;
  ASSERT_EQ(w.shape_size(), 4);
  const int64_t heads = w.shape(1);
  EXPECT_EQ(heads, Case("decode_causal").meta["expect"]["num_heads"].get<int64_t>());
  EXPECT_EQ(w.shape(0), 2);
  EXPECT_EQ(w.shape(2), 1);
  EXPECT_EQ(w.shape(3), 7);
  EXPECT_EQ(report->last_step_tokens, 7);
  ASSERT_EQ(w.dtype(), v1::FLOAT32);
  ASSERT_EQ(w.data().size(), static_cast<size_t>(2 * heads * 7) * sizeof(float));
  const auto* p = reinterpret_cast<const float*>(w.data().data());
  for (int64_t row = 0; row < 2 * heads; ++row) {
    double sum = 0;
    for (int64_t k = 0; k < 7; ++k) sum += p[row * 7 + k];
    EXPECT_NEAR(sum, 1.0, 1e-5) << row;
  }
}

TEST_P(DecodeBench, ARefusedStepIsReportedAndEndsItsSession) {
  // A pool of one 4-token block (2 * 4 tokens * E * 4 bytes): a 1-row session's fifth token is
  // refused.
  const int64_t embed = Case("decode_causal").inputs.query.size(2);
  OwnServer s;
  ASSERT_TRUE(s.Start({"--kv-cache-bytes", std::to_string(2 * 4 * embed * 4)}));
  client::DecodeBenchOptions o = Options(GetParam());
  o.sessions = 1;
  o.batch = 1;
  o.prefill = 0;
  o.tokens = 6;
  auto report = client::RunDecodeBench(*s.Client(), o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->steps, 4);
  EXPECT_EQ(report->errors, 1);
  EXPECT_NE(report->first_error.find("RESOURCE_EXHAUSTED"), std::string::npos)
      << report->first_error;
  EXPECT_NE(report->first_error.find("KV cache full"), std::string::npos) << report->first_error;
  const std::string method = GetParam() ? "ForwardStream" : "Forward";
  EXPECT_EQ(CountLogged(s.server.log(), method, "failed"), 1) << s.server.log();
  EXPECT_EQ(s.Metric("mha_kv_cache_blocks_total"), 1);
  EXPECT_EQ(s.Metric("mha_sessions_open"), 0);  // closed after the refusal
}

INSTANTIATE_TEST_SUITE_P(UnaryAndStream, DecodeBench, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Stream" : "Unary"; });

TEST(DecodeBenchErrors, AnUnknownModelIsAStatusNotAReport) {
  OwnServer s;
  ASSERT_TRUE(s.Start({}));
  client::DecodeBenchOptions o = Options(false);
  o.model = "no_such_model";
  auto report = client::RunDecodeBench(*s.Client(), o);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kNotFound) << report.status().ToString();
  o = Options(true);
  o.tokens = 0;
  report = client::RunDecodeBench(*s.Client(), o);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kInvalidArgument);
}

TEST(DecodeBenchErrors, StatelessStepsSendTheWholePrefix) {
  OwnServer s;
  ASSERT_TRUE(s.Start({}));
  client::DecodeBenchOptions o = Options(false);
  o.stateless = true;
  o.sessions = 2;
  o.tokens = 4;
  auto report = client::RunDecodeBench(*s.Client(), o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->errors, 0) << report->first_error;
  EXPECT_EQ(report->steps, 2 * 4);
  EXPECT_EQ(report->kv_blocks, 0);  // no session, no cache
  EXPECT_EQ(s.Metric("mha_kv_cache_blocks_used"), 0);
}

}  // namespace decode_bench_test
}  // namespace mha::testing
