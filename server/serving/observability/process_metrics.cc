// The process's own metrics, collected at scrape time: resident memory and CPU time from /proc,
// and the CUDA caching allocator's memory per device on CUDA builds.
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "mha/runtime.h"
#include "server/serving/observability/metrics.h"

namespace mha::serve {
namespace {

prometheus::ClientMetric Sample(prometheus::MetricType type, double value,
                                std::vector<prometheus::ClientMetric::Label> labels = {}) {
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  return metric;
}

// The CUDA caching allocator's memory per device (nothing on CPU builds or without a GPU).
void AppendGpuMemory(std::vector<prometheus::MetricFamily>* families) {
  using prometheus::MetricType;
  const std::vector<DeviceMemory> devices = CudaMemoryStats();
  if (devices.empty()) return;
  prometheus::MetricFamily allocated{"mha_gpu_memory_allocated_bytes",
                                     "CUDA caching allocator: bytes allocated",
                                     MetricType::Gauge,
                                     {}};
  prometheus::MetricFamily reserved{"mha_gpu_memory_reserved_bytes",
                                    "CUDA caching allocator: bytes reserved",
                                    MetricType::Gauge,
                                    {}};
  for (const DeviceMemory& d : devices) {
    const std::vector<prometheus::ClientMetric::Label> labels{
        {"device", "cuda:" + std::to_string(d.device)}};
    allocated.metric.push_back(
        Sample(MetricType::Gauge, static_cast<double>(d.allocated_bytes), labels));
    reserved.metric.push_back(
        Sample(MetricType::Gauge, static_cast<double>(d.reserved_bytes), labels));
  }
  families->push_back(std::move(allocated));
  families->push_back(std::move(reserved));
}

}  // namespace

std::vector<prometheus::MetricFamily> CollectProcessMetrics() {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> families;
  const long page = sysconf(_SC_PAGESIZE);
  std::ifstream statm("/proc/self/statm");
  long long size_pages = 0, resident_pages = 0;
  if (statm >> size_pages >> resident_pages) {
    families.push_back({"process_resident_memory_bytes",
                        "Resident memory size in bytes",
                        MetricType::Gauge,
                        {Sample(MetricType::Gauge, static_cast<double>(resident_pages) * page)}});
  }
  // /proc/self/stat: "pid (comm) state ..." -- comm may hold spaces; fields after ')' start at 3.
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close != std::string::npos) {
    std::istringstream fields(stat.substr(close + 1));
    std::string field;
    double utime = 0, stime = 0;
    bool ok = true;
    for (int index = 3; index <= 15 && ok; ++index) {
      ok = static_cast<bool>(fields >> field);
      if (ok && index == 14) utime = std::stod(field);
      if (ok && index == 15) stime = std::stod(field);
    }
    const long ticks = sysconf(_SC_CLK_TCK);
    if (ok && ticks > 0) {
      families.push_back({"process_cpu_seconds_total",
                          "Total user and system CPU time spent in seconds",
                          MetricType::Counter,
                          {Sample(MetricType::Counter, (utime + stime) / ticks)}});
    }
  }
  AppendGpuMemory(&families);
  return families;
}

}  // namespace mha::serve
