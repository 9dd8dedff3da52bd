// What every load generator of mha-client (bench, decode, afd, local-bench) and bench/'s echo floor
// reports about a sample of latencies the same way: how many, their mean, nearest-rank
// percentiles and the largest; and how that summary reads as JSON. Torch-free.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace mha::client {

struct LatencyStats {
  int64_t count = 0;
  double mean_us = 0, p50_us = 0, p90_us = 0, p99_us = 0, max_us = 0;
};

// Nearest-rank percentile `p` (0..100) of sorted values (0 when empty).
double Percentile(const std::vector<double>& sorted, double p);

// The arithmetic mean (0 when empty).
double Mean(const std::vector<double>& values);

// The summary of `values` (microseconds, any order; sorted here).
LatencyStats SummarizeLatencies(std::vector<double> values);

// {"mean", "p50", "p90", "p99", "max"}, each key followed by `suffix` (e.g. "_us"); with
// `count_key` set, the count under that key too.
nlohmann::json LatencyJson(const LatencyStats& stats, const std::string& suffix = "",
                           const std::string& count_key = "");

}  // namespace mha::client
