// The server's own CPU time, read before and after a benchmark run (the client shares the
// machine's cores, so throughput alone does not say what a request costs the server), and the
// report every load generator makes of it. Two sources: /proc/PID/stat (utime + stime of a server
// on this machine) or the server's metrics endpoint (process_cpu_seconds_total, scraped over plain
// HTTP). Torch-free.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "mha/status.h"

namespace mha::client {

struct ServerCpuSource {
  int pid = 0;              // > 0: read /proc/PID/stat
  std::string metrics_url;  // else, when set: "http://host:port/metrics" (or "host:port")
  bool enabled() const { return pid > 0 || !metrics_url.empty(); }
  std::string Describe() const;  // "pid 123" or the URL
};

// utime + stime of process `pid`, in seconds.
StatusOr<double> ProcCpuSeconds(int pid);

// The value of the first sample of `name` (no labels) in a Prometheus text exposition.
StatusOr<double> PrometheusSample(const std::string& text, const std::string& name);

// GET `url` over plain HTTP/1.0 (no TLS); the body when the status is 200.
StatusOr<std::string> HttpGet(const std::string& url);

// The server's CPU seconds from `source` (pid first, else the metrics endpoint).
StatusOr<double> ReadServerCpuSeconds(const ServerCpuSource& source);

// What the server's CPU did per unit of work (a request, a decode step, a layer message) against
// the math it served. The CPU fields come from ServerCpuMeter; the FLOPs and the matmul rate from
// the caller (the CLI, which has LibTorch: client/cli/efficiency.h).
struct ServerCpuReport {
  bool measured = false;
  std::string source, error;      // "pid 123" / the metrics URL; why it was not measured
  double cpu_s = 0;               // server CPU seconds over the timed run
  double cpu_us_per_request = 0;  // cpu_s / the units answered (requests, steps or messages)
  double flops_per_request = 0;   // one unit's attention FLOPs (0 = not given)
  double matmul_flops_per_s = 0;  // one core's fp32 matmul rate, measured in the same run
  // FLOPs / (CPU per unit * matmul rate): the share of the server's CPU that the unit's math
  // would take at that rate. 1.0 = serving costs nothing beyond the matmuls.
  double efficiency = 0;
};

// Reads the server's CPU seconds when made and again at Finish: the timed run in between. Does
// nothing (an unmeasured report) when the source is not enabled.
class ServerCpuMeter {
 public:
  explicit ServerCpuMeter(const ServerCpuSource& source);
  // The report for `units` answered units of work (a zero count leaves the per-unit figure 0).
  ServerCpuReport Finish(int64_t units) const;

 private:
  const ServerCpuSource source_;
  StatusOr<double> before_;
};

// "server cpu (pid 1234): 813.0 us per request (12.345 s)" and, when the FLOPs are known, the
// efficiency line; "" when not asked for. `per` names the unit ("request", "step", ...).
std::string ServerCpuReportText(const ServerCpuReport& report, const char* per = "request");

// The report as JSON, the per-unit keys named after `per`: "cpu_us_per_request",
// "flops_per_request" (or _step, _message).
nlohmann::json ServerCpuJson(const ServerCpuReport& report, const std::string& per = "request");

}  // namespace mha::client
