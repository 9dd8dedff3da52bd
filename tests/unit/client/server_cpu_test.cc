// ServerCpuMeter and its report (client/bench/server_cpu.h): the CPU a process spent between the
// meter's two readings, per unit of work; an unreadable source says why instead of a number; the
// Prometheus sample reader; the report's text and JSON keys named after the unit.
#include "client/bench/server_cpu.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace mha::client {
namespace server_cpu_test {

// Spins until this process's CPU seconds (as /proc reports them) have moved past `start`.
void BurnPast(double start) {
  volatile double sink = 0;
  for (;;) {
    for (int i = 0; i < 100000; ++i) sink = sink + i * 1e-9;
    auto now = ProcCpuSeconds(getpid());
    ASSERT_TRUE(now.ok()) << now.status().ToString();
    if (*now > start) return;
  }
}

TEST(ServerCpuMeter, ReportsTheCpuSpentBetweenItsReadingsPerUnit) {
  ServerCpuSource self;
  self.pid = getpid();
  const ServerCpuMeter meter(self);
  auto before = ProcCpuSeconds(self.pid);
  ASSERT_TRUE(before.ok());
  BurnPast(*before);
  const ServerCpuReport r = meter.Finish(4);
  ASSERT_TRUE(r.measured) << r.error;
  EXPECT_EQ(r.source, "pid " + std::to_string(self.pid));
  EXPECT_GT(r.cpu_s, 0);
  EXPECT_DOUBLE_EQ(r.cpu_us_per_request, r.cpu_s * 1e6 / 4);
  EXPECT_DOUBLE_EQ(meter.Finish(0).cpu_us_per_request, 0);
}

TEST(ServerCpuMeter, MeasuresNothingWithoutASourceAndSaysWhyWhenOneFails) {
  const ServerCpuReport off = ServerCpuMeter(ServerCpuSource()).Finish(10);
  EXPECT_FALSE(off.measured);
  EXPECT_TRUE(off.error.empty());
  EXPECT_EQ(ServerCpuReportText(off), "");
  ServerCpuSource gone;
  gone.metrics_url = "http://127.0.0.1:1/metrics";  // nothing listens on port 1
  const ServerCpuReport failed = ServerCpuMeter(gone).Finish(10);
  EXPECT_FALSE(failed.measured);
  EXPECT_NE(failed.error.find("127.0.0.1:1"), std::string::npos) << failed.error;
  EXPECT_NE(ServerCpuReportText(failed).find("not measured"), std::string::npos);
}

TEST(ServerCpuReport, TextAndJsonNameTheUnit) {
  ServerCpuReport r;
  r.measured = true;
  r.source = "pid 7";
  r.cpu_s = 2;
  r.cpu_us_per_request = 500;
  r.flops_per_request = 1e6;
  r.matmul_flops_per_s = 1e10;
  r.efficiency = 0.2;
  EXPECT_EQ(ServerCpuReportText(r, "step").substr(0, 50),
            "server cpu (pid 7): 500.0 us per step (2.000 s)\nef");
  const nlohmann::json j = ServerCpuJson(r, "message");
  EXPECT_DOUBLE_EQ(j.at("cpu_us_per_message").get<double>(), 500);
  EXPECT_DOUBLE_EQ(j.at("flops_per_message").get<double>(), 1e6);
  EXPECT_FALSE(j.contains("cpu_us_per_request"));
  EXPECT_TRUE(ServerCpuJson(r).contains("cpu_us_per_request"));
}

TEST(PrometheusSample, ReadsTheUnlabelledSampleOfTheNameOnly) {
  const std::string text =
      "# HELP process_cpu_seconds_total CPU\n"
      "process_cpu_seconds_total_extra 9\n"
      "process_cpu_seconds_total{a=\"b\"} 8\n"
      "process_cpu_seconds_total 12.5\n";
  auto v = PrometheusSample(text, "process_cpu_seconds_total");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_DOUBLE_EQ(*v, 12.5);
  EXPECT_FALSE(PrometheusSample(text, "absent_total").ok());
}

}  // namespace server_cpu_test
}  // namespace mha::client
