#include "client/bench/latency_stats.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>

namespace mha::client {

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * sorted.size()));
  return sorted[std::min(sorted.size() - 1, rank > 0 ? rank - 1 : 0)];
}

double Mean(const std::vector<double>& values) {
  if (values.empty()) return 0;
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

LatencyStats SummarizeLatencies(std::vector<double> values) {
  LatencyStats s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.count = static_cast<int64_t>(values.size());
  s.mean_us = Mean(values);
  s.p50_us = Percentile(values, 50);
  s.p90_us = Percentile(values, 90);
  s.p99_us = Percentile(values, 99);
  s.max_us = values.back();
  return s;
}

nlohmann::json LatencyJson(const LatencyStats& s, const std::string& suffix,
                           const std::string& count_key) {
  nlohmann::json j = {{"mean" + suffix, s.mean_us},
                      {"p50" + suffix, s.p50_us},
                      {"p90" + suffix, s.p90_us},
                      {"p99" + suffix, s.p99_us},
                      {"max" + suffix, s.max_us}};
  if (!count_key.empty()) j[count_key] = s.count;
  return j;
}

}  // namespace mha::client
