// Closed-loop load generator for `mha-client bench`: `concurrency` calls always in flight (async
// callback API, no thread per call), each answer immediately followed by the next request.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "mha_client.h"

namespace mha::client {

struct BenchOptions {
  int concurrency = 1;
  double duration_s = 10.0;  // used when requests == 0
  int64_t requests = 0;      // total timed requests; 0 = run for duration_s
  int64_t warmup = 4;        // untimed requests first (sequential)
  std::chrono::milliseconds timeout{60000};
  bool ping = false;  // time GetModel round trips instead: the RPC cost without a forward pass
};

struct BenchReport {
  int64_t ok = 0;
  int64_t errors = 0;
  std::map<std::string, int64_t> error_codes;  // "RESOURCE_EXHAUSTED" -> count
  std::string first_error;
  double seconds = 0;
  double throughput = 0;  // successful requests per second
  double latency_mean_us = 0, latency_p50_us = 0, latency_p90_us = 0, latency_p99_us = 0,
         latency_max_us = 0;
  double server_queue_mean_us = 0;    // from the responses' queue_us
  double server_compute_mean_us = 0;  // from the responses' compute_us
};

BenchReport RunBench(AttentionClient& client, const v1::ForwardRequest& request,
                     const BenchOptions& options);

std::string BenchReportText(const BenchReport& report);
std::string BenchReportJson(const BenchReport& report);  // one JSON object

}  // namespace mha::client
