// The server's own CPU time, read before and after a benchmark run (issue 26: the client shares
// the machine's cores, so throughput alone does not say what a request costs the server). Two
// sources: /proc/PID/stat (utime + stime of a server on this machine) or the server's metrics
// endpoint (process_cpu_seconds_total, scraped over plain HTTP). Torch-free.
#pragma once

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

}  // namespace mha::client
