// Load generator for `mha-client bench` (async callback API, no thread per call):
//   closed loop: `concurrency` calls always in flight, each answer followed by the next request;
//   open loop (rate > 0): requests sent at `rate` per second (Poisson or fixed intervals) whatever
//   the answers do; latency counts from the intended send time (no coordinated omission).
// Each call sends one request picked at random from the given pool (e.g. one per length).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "client/bench/latency_stats.h"
#include "client/bench/server_cpu.h"
#include "client/mha_client.h"
#include "client/shm_regions.h"

namespace mha::client {

struct BenchOptions {
  int concurrency = 1;
  double duration_s = 10.0;  // used when requests == 0
  int64_t requests = 0;      // total timed requests; 0 = run for duration_s
  int64_t warmup = 4;        // untimed requests first (sequential)
  std::chrono::milliseconds timeout{60000};
  // deadline_max > 0: each call's deadline is drawn uniformly from [deadline_min, deadline_max]
  // instead (clients with short, varied deadlines: bench/run_all.py's deadline row).
  std::chrono::milliseconds deadline_min{0}, deadline_max{0};
  bool ping = false;    // time GetModel round trips instead: the RPC cost without a forward pass
  double rate = 0;      // > 0: open loop at this many requests per second
  bool poisson = true;  // open loop: exponential gaps (Poisson arrivals), else fixed 1/rate
  uint64_t seed = 0;    // request picks and Poisson gaps
  // When enabled: the server's CPU seconds read just before and after the timed run (after the
  // warmup), reported per successful request (server_cpu.h).
  ServerCpuSource server_cpu;
  // --shm: the requests' tensors in these shared-memory regions (not owned): made by
  // ShmRegions::Create for --protocol oip, by CreateV1 for mha.v1.
  const ShmRegions* shm = nullptr;
};

struct BenchReport {
  int64_t ok = 0;
  int64_t errors = 0;
  std::map<std::string, int64_t> error_codes;  // "RESOURCE_EXHAUSTED" -> count
  std::string first_error;
  double seconds = 0;
  double throughput = 0;  // successful requests per second
  LatencyStats latency;   // the successful calls, as the client saw them
  // The server's own split, from the responses' queue_us and compute_us.
  LatencyStats server_queue, server_compute;
  double offered_rate = 0;  // open loop: requests sent per second (0 = closed loop)
  ServerCpuReport server_cpu;
  // Every successful call in the order answered: its latency and when it was answered (seconds
  // since the timed run's start). For pictures (mha-client bench --plot); not in the text or JSON.
  std::vector<double> sample_latency_us, sample_done_s;
};

BenchReport RunBench(AttentionClient& client, const std::vector<v1::ForwardRequest>& requests,
                     const BenchOptions& options);
inline BenchReport RunBench(AttentionClient& client, const v1::ForwardRequest& request,
                            const BenchOptions& options) {
  return RunBench(client, std::vector<v1::ForwardRequest>{request}, options);
}

std::string BenchReportText(const BenchReport& report);
std::string BenchReportJson(const BenchReport& report);  // one JSON object

}  // namespace mha::client
