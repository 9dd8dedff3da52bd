// LatencyStats (client/bench/latency_stats.h), the summary every load generator reports: nearest-
// rank percentiles of any order of samples, the mean and the largest, and the JSON keys the
// benchmark drivers read.
#include "client/bench/latency_stats.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <vector>

namespace mha::client {
namespace latency_stats_test {

TEST(LatencyStats, SummarizesSamplesInAnyOrderByNearestRank) {
  std::vector<double> values;
  for (int i = 100; i >= 1; --i) values.push_back(static_cast<double>(i));  // 100 .. 1
  const LatencyStats s = SummarizeLatencies(values);
  EXPECT_EQ(s.count, 100);
  EXPECT_DOUBLE_EQ(s.mean_us, 50.5);
  EXPECT_DOUBLE_EQ(s.p50_us, 50);  // rank ceil(0.50 * 100) = 50
  EXPECT_DOUBLE_EQ(s.p90_us, 90);
  EXPECT_DOUBLE_EQ(s.p99_us, 99);
  EXPECT_DOUBLE_EQ(s.max_us, 100);
}

TEST(LatencyStats, ASmallSampleTakesTheRankAboveAndAnEmptyOneIsZero) {
  const LatencyStats three = SummarizeLatencies({30, 10, 20});
  EXPECT_DOUBLE_EQ(three.p50_us, 20);  // rank ceil(1.5) = 2
  EXPECT_DOUBLE_EQ(three.p90_us, 30);
  EXPECT_DOUBLE_EQ(three.mean_us, 20);
  const LatencyStats none = SummarizeLatencies({});
  EXPECT_EQ(none.count, 0);
  EXPECT_DOUBLE_EQ(none.p99_us, 0);
  EXPECT_DOUBLE_EQ(Percentile({}, 50), 0);
  EXPECT_DOUBLE_EQ(Percentile({7}, 0), 7);
}

TEST(LatencyStats, JsonNamesEachFigureWithTheSuffixAndTheCountWhenAsked) {
  const LatencyStats s = SummarizeLatencies({1, 2, 3, 4});
  const nlohmann::json plain = LatencyJson(s);
  EXPECT_DOUBLE_EQ(plain.at("mean").get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(plain.at("p50").get<double>(), 2);
  EXPECT_DOUBLE_EQ(plain.at("max").get<double>(), 4);
  EXPECT_FALSE(plain.contains("count"));
  const nlohmann::json named = LatencyJson(s, "_us", "messages");
  EXPECT_DOUBLE_EQ(named.at("p99_us").get<double>(), 4);
  EXPECT_EQ(named.at("messages").get<int64_t>(), 4);
  EXPECT_FALSE(named.contains("p50"));
}

}  // namespace latency_stats_test
}  // namespace mha::client
