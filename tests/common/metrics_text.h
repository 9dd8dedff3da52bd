// Reading Prometheus text exposition in tests: the one parser every suite uses, in-process
// (Metrics::Serialize) and over HTTP (tests/service/metrics_scrape.h scrapes a server's /metrics
// with it). Header-only, no dependencies.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace mha::testing {

// Calls `line(text)` for each line of `text`.
template <typename Fn>
void ForEachMetricLine(std::string_view text, Fn&& line) {
  while (!text.empty()) {
    const size_t end = text.find('\n');
    line(text.substr(0, end));
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
  }
}

// The value of the sample `series`, written exactly as the exposition writes it (a bare name, or
// the name and its labels: mha_requests_total{code="OK",model="enc"}); nullopt when absent.
inline std::optional<double> SeriesValue(std::string_view text, std::string_view series) {
  std::optional<double> value;
  ForEachMetricLine(text, [&](std::string_view line) {
    if (value || line.size() <= series.size() || line.substr(0, series.size()) != series ||
        line[series.size()] != ' ') {
      return;
    }
    value = std::strtod(std::string(line.substr(series.size() + 1)).c_str(), nullptr);
  });
  return value;
}

// The sum of the samples of `family` (name{labels} lines) whose labels include `label`, a whole
// name="value" pair (code="OK"); "" sums every sample of the family. 0 when there is none.
inline double SeriesSum(std::string_view text, std::string_view family,
                        std::string_view label = "") {
  double sum = 0;
  ForEachMetricLine(text, [&](std::string_view line) {
    if (line.size() <= family.size() + 1 || line.substr(0, family.size()) != family ||
        line[family.size()] != '{') {
      return;
    }
    const size_t close = line.find("} ");
    if (close == std::string_view::npos) return;
    const std::string labels =
        "," + std::string(line.substr(family.size() + 1, close - family.size() - 1)) + ",";
    if (!label.empty() && labels.find("," + std::string(label) + ",") == std::string::npos) return;
    sum += std::strtod(std::string(line.substr(close + 2)).c_str(), nullptr);
  });
  return sum;
}

}  // namespace mha::testing
