// A server's /metrics in the service tests: one helper for every suite. The port the server wrote
// to --metrics-port-file, the scraped text, one series' value and a family's sum; the text is read
// by tests/common/metrics_text.h, the parser the in-process tests use too.
#pragma once

#include <httplib.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <string>

#include "metrics_text.h"
#include "wait.h"

namespace mha::testing {

// The port a server wrote to `path` (--metrics-port-file, --port-file): waits up to 60 s for the
// file; 0 when none came.
inline int ReadPortFile(const std::string& path) {
  int port = 0;
  const auto written = WaitUntil(
      [&] {
        std::ifstream in(path);
        return in >> port && port > 0;
      },
      "a port in " + path);
  return written ? port : 0;
}

// GET /metrics on 127.0.0.1:`port`; nullopt when the endpoint did not answer 200.
inline std::optional<std::string> ScrapeMetrics(int port) {
  httplib::Client http("127.0.0.1", port);
  auto res = http.Get("/metrics");
  if (!res || res->status != 200) return std::nullopt;
  return res->body;
}

// One series' value (SeriesValue's spelling): 0 when absent, -1 when the endpoint did not answer.
inline double ScrapeMetric(int port, const std::string& series) {
  const auto text = ScrapeMetrics(port);
  return text ? SeriesValue(*text, series).value_or(0) : -1;
}

// The sum of `family`'s series whose labels include `label` (SeriesSum; "" = all of them); -1
// when the endpoint did not answer.
inline double ScrapeMetricSum(int port, const std::string& family, const std::string& label = "") {
  const auto text = ScrapeMetrics(port);
  return text ? SeriesSum(*text, family, label) : -1;
}

}  // namespace mha::testing
