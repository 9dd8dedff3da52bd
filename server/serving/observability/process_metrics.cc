// The process's own metrics, collected at scrape time: resident memory and CPU time from /proc,
// and the CUDA caching allocator's memory per device on CUDA builds.
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "server/serving/observability/metrics.h"

#ifdef MHA_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

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
#ifdef MHA_WITH_CUDA
  using prometheus::MetricType;
  const int devices = static_cast<int>(c10::cuda::device_count());
  if (devices > 0) {
    prometheus::MetricFamily allocated{"mha_gpu_memory_allocated_bytes",
                                       "CUDA caching allocator: bytes allocated",
                                       MetricType::Gauge,
                                       {}};
    prometheus::MetricFamily reserved{"mha_gpu_memory_reserved_bytes",
                                      "CUDA caching allocator: bytes reserved",
                                      MetricType::Gauge,
                                      {}};
    namespace alloc = c10::cuda::CUDACachingAllocator;
    constexpr size_t aggregate = 0;  // StatType::AGGREGATE (its namespace moved across versions)
    for (int d = 0; d < devices; ++d) {
      // Before CUDA is initialised in this process (e.g. every model on the CPU) the allocator
      // has no stats and throws: then there is nothing to report for the device. The stats type
      // is not named: CUDACachingAllocator::DeviceStats in 1.x, an alias of
      // c10::CachingDeviceAllocator::DeviceStats in later 2.x.
      int64_t allocated_bytes = 0, reserved_bytes = 0;
      try {
        const auto stats = alloc::getDeviceStats(static_cast<c10::DeviceIndex>(d));
        allocated_bytes = stats.allocated_bytes[aggregate].current;
        reserved_bytes = stats.reserved_bytes[aggregate].current;
      } catch (const c10::Error&) {
        continue;
      }
      const std::vector<prometheus::ClientMetric::Label> labels{
          {"device", "cuda:" + std::to_string(d)}};
      allocated.metric.push_back(
          Sample(MetricType::Gauge, static_cast<double>(allocated_bytes), labels));
      reserved.metric.push_back(
          Sample(MetricType::Gauge, static_cast<double>(reserved_bytes), labels));
    }
    if (!allocated.metric.empty()) {
      families->push_back(std::move(allocated));
      families->push_back(std::move(reserved));
    }
  }
#else
  (void)families;
#endif
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
