// Metrics: recording methods -> exposition text with the contract's series names and values;
// the HTTP endpoint (/metrics, /healthz, /readyz); the batcher and the instrumented runner
// feeding it.
#include "server/serving/observability/metrics.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <torch/version.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

#include "batch_test_util.h"
#include "metrics_text.h"
#include "server/frontends/http/metrics_http.h"
#include "server/serving/kinds/multihead/dynamic_batcher.h"

namespace mha::serve {
namespace metrics_test {

// The value of the sample line `series` (exact name and labels as serialized), NaN if absent.
double Sample(const std::string& text, const std::string& series) {
  return testing::SeriesValue(text, series).value_or(std::nan(""));
}

BuildInfo TestBuild() { return BuildInfo{"9.9.9", "1.13.1", "cpu"}; }

TEST(MetricsTest, RecordedValuesAppearUnderTheContractNames) {
  Metrics metrics(TestBuild());
  metrics.ForModel("enc")->RecordRequest(StatusCode::kOk, 0.002);
  metrics.ForModel("enc")->RecordRequest(StatusCode::kOk, 0.004);
  metrics.ForModel("enc")->RecordRequest(StatusCode::kInvalidArgument, 0.0001);
  metrics.RecordQueue("enc", 0.001);
  metrics.RecordCompute("enc", 0.003);
  metrics.RecordBatch("enc", 3, 5, 60, 80);
  metrics.SetQueueDepth("enc", 7);
  metrics.AddInflight("enc", 2);
  metrics.AddInflight("enc", -1);
  metrics.SetModelLoaded("enc", true);
  metrics.SetModelLoaded("broken", false);
  const std::string text = metrics.Serialize();

  EXPECT_EQ(Sample(text, R"(mha_requests_total{code="OK",model="enc"})"), 2);
  EXPECT_EQ(Sample(text, R"(mha_requests_total{code="INVALID_ARGUMENT",model="enc"})"), 1);
  EXPECT_EQ(Sample(text, R"(mha_request_duration_seconds_count{model="enc"})"), 3);
  EXPECT_NEAR(Sample(text, R"(mha_request_duration_seconds_sum{model="enc"})"), 0.0061, 1e-9);
  EXPECT_EQ(Sample(text, R"(mha_request_duration_seconds_bucket{model="enc",le="5e-05"})"), 0);
  EXPECT_EQ(Sample(text, R"(mha_request_duration_seconds_bucket{model="enc",le="0.0002"})"), 1);
  EXPECT_EQ(Sample(text, R"(mha_request_duration_seconds_bucket{model="enc",le="+Inf"})"), 3);
  EXPECT_EQ(Sample(text, R"(mha_queue_duration_seconds_count{model="enc"})"), 1);
  EXPECT_EQ(Sample(text, R"(mha_compute_duration_seconds_count{model="enc"})"), 1);
  EXPECT_EQ(Sample(text, R"(mha_batch_size_count{model="enc"})"), 1);
  EXPECT_EQ(Sample(text, R"(mha_batch_size_sum{model="enc"})"), 3);
  EXPECT_EQ(Sample(text, R"(mha_batch_rows_sum{model="enc"})"), 5);
  EXPECT_EQ(Sample(text, R"(mha_batch_tokens_sum{model="enc"})"), 80);
  EXPECT_EQ(Sample(text, R"(mha_padding_efficiency_sum{model="enc"})"), 0.75);
  EXPECT_EQ(Sample(text, R"(mha_padding_efficiency_bucket{model="enc",le="0.7"})"), 0);
  EXPECT_EQ(Sample(text, R"(mha_padding_efficiency_bucket{model="enc",le="0.8"})"), 1);
  EXPECT_EQ(Sample(text, R"(mha_real_tokens_total{model="enc"})"), 60);
  EXPECT_EQ(Sample(text, R"(mha_padded_tokens_total{model="enc"})"), 80);
  EXPECT_EQ(Sample(text, R"(mha_queue_depth{model="enc"})"), 7);
  EXPECT_EQ(Sample(text, R"(mha_inflight_requests{model="enc"})"), 1);
  EXPECT_EQ(Sample(text, R"(mha_model_loaded{model="enc"})"), 1);
  EXPECT_EQ(Sample(text, R"(mha_model_loaded{model="broken"})"), 0);
  EXPECT_EQ(Sample(text, R"(mha_build_info{device="cpu",torch_version="1.13.1",version="9.9.9"})"),
            1);
  EXPECT_GT(Sample(text, "process_resident_memory_bytes"), 1 << 20);
  EXPECT_GT(Sample(text, "process_cpu_seconds_total"), 0);
  EXPECT_NE(text.find("# TYPE mha_requests_total counter"), std::string::npos);
  EXPECT_NE(text.find("# TYPE mha_padding_efficiency histogram"), std::string::npos);
  EXPECT_NE(text.find("# TYPE process_cpu_seconds_total counter"), std::string::npos);
  EXPECT_EQ(text.find("mha_gpu_memory"), std::string::npos) << "CPU build: no GPU series";
}

TEST(MetricsTest, CurrentBuildInfoNamesTorch) {
  const BuildInfo info = CurrentBuildInfo();
  EXPECT_FALSE(info.version.empty());
  EXPECT_EQ(info.torch_version.rfind(TORCH_VERSION_MAJOR == 1 ? "1." : "2.", 0), 0u);
  EXPECT_TRUE(info.device == "cpu" || info.device == "cuda");
}

TEST(MetricsHttpTest, ServesMetricsHealthAndReadiness) {
  Metrics metrics(TestBuild());
  metrics.ForModel("enc")->RecordRequest(StatusCode::kOk, 0.001);
  std::atomic<bool> ready{false};
  MetricsHttpServer http(&metrics, [&ready] { return ready.load(); });
  const Status started = http.Start("127.0.0.1:0");
  ASSERT_TRUE(started.ok()) << started.ToString();
  ASSERT_GT(http.port(), 0);

  httplib::Client client("127.0.0.1", http.port());
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(Sample(res->body, R"(mha_requests_total{code="OK",model="enc"})"), 1);
  EXPECT_NE(res->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  res = client.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  res = client.Get("/readyz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  ready = true;
  res = client.Get("/readyz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  res = client.Get("/nope");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  http.Stop();
  http.Stop();
}

TEST(MetricsHttpTest, RefusesBadOrBusyAddresses) {
  Metrics metrics(TestBuild());
  MetricsHttpServer first(&metrics, nullptr);
  ASSERT_TRUE(first.Start("127.0.0.1:0").ok());
  MetricsHttpServer second(&metrics, nullptr);
  EXPECT_EQ(second.Start("127.0.0.1:" + std::to_string(first.port())).code(),
            StatusCode::kUnavailable);
  MetricsHttpServer third(&metrics, nullptr);
  EXPECT_EQ(third.Start("no-port").code(), StatusCode::kInvalidArgument);
  std::string host;
  int port = 0;
  ASSERT_TRUE(SplitHostPort("[::1]:8502", &host, &port));
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 8502);
  EXPECT_FALSE(SplitHostPort("host:99999", &host, &port));
}

TEST(MetricsTest, BatcherRecordsBatchesAndQueueDepth) {
  Metrics metrics(TestBuild());
  auto forward = [](const ForwardInputs& in, ForwardOutputs* out) {
    out->output = in.query.clone();
    return Status::Ok();
  };
  BatcherOptions o;
  o.max_queue_delay_us = 200000;
  DynamicBatcher batcher("enc", BatchModelInfo{}, forward, o, metrics.ForModel("enc"));
  std::atomic<int> done{0};
  for (int64_t t : {10, 12, 14}) {  // one bucket: one pass, 36 real / 42 padded tokens
    InferenceTask task;
    task.inputs.query = ToHost(at::ones({1, t, 4}));
    batcher.Submit(std::move(task), [&done](InferenceResult r) { done += r.status.ok(); });
  }
  batcher.Shutdown();
  ASSERT_EQ(done.load(), 3);
  const std::string text = metrics.Serialize();
  EXPECT_EQ(Sample(text, R"(mha_batch_size_count{model="enc"})"), 1);
  EXPECT_EQ(Sample(text, R"(mha_batch_size_sum{model="enc"})"), 3);
  EXPECT_EQ(Sample(text, R"(mha_real_tokens_total{model="enc"})"), 36);
  EXPECT_EQ(Sample(text, R"(mha_padded_tokens_total{model="enc"})"), 42);
  EXPECT_NEAR(Sample(text, R"(mha_padding_efficiency_sum{model="enc"})"), 36.0 / 42, 1e-12);
  EXPECT_EQ(Sample(text, R"(mha_queue_depth{model="enc"})"), 0);
}

// With batching off each pass is a batch of one: the scheduler records it and the queue depth
// (per-request timings and inflight are ServerCore's, see server_core_test.cc).
TEST(MetricsTest, UnbatchedSchedulerRecordsEachPassAsABatchOfOne) {
  Metrics metrics(TestBuild());
  std::shared_ptr<const MhaModel> shared = testing::SmallModel();
  ASSERT_NE(shared, nullptr);
  BatcherOptions o;
  o.batching = false;
  o.max_queue_size = 4;
  auto scheduler = DynamicBatcher::ForModel(shared, "enc", o, metrics.ForModel("enc"));
  DynamicBatcher& runner = *scheduler;
  std::atomic<int> answered{0};
  for (int64_t t : {5, 5}) {
    InferenceTask task;
    task.model_name = "enc";
    task.inputs.query = ToHost(at::ones({2, t, 16}));
    runner.Submit(std::move(task), [&answered](InferenceResult r) { answered += r.status.ok(); });
  }
  runner.Shutdown();
  EXPECT_EQ(answered.load(), 2);
  const std::string text = metrics.Serialize();
  EXPECT_EQ(Sample(text, R"(mha_batch_size_count{model="enc"})"), 2);
  EXPECT_EQ(Sample(text, R"(mha_batch_rows_sum{model="enc"})"), 4);
  EXPECT_EQ(Sample(text, R"(mha_padding_efficiency_sum{model="enc"})"), 2);
  EXPECT_EQ(Sample(text, R"(mha_queue_depth{model="enc"})"), 0);
}

// One aggregator per model version: each version's statistics are its own, /metrics sums them per
// model, and reading (StatsFor, Serialize) never creates an aggregator or a series.
TEST(StatsAggregatorTest, VersionsKeepTheirOwnNumbersAndReadingCreatesNothing) {
  Metrics metrics(TestBuild());
  StatsAggregator* one = metrics.ForVersion("enc", "1");
  StatsAggregator* two = metrics.ForVersion("enc", "2");
  one->RecordRequest(StatusCode::kOk, 0.001);
  one->RecordInference(true, 2, 10, 20);
  two->RecordRequest(StatusCode::kInvalidArgument, 0.002, Protocol::kOip);
  two->RecordInference(false, 0, 0, 0);
  const StatsSnapshot a = one->Read(), b = two->Read();
  EXPECT_EQ(a.success_count, 1);
  EXPECT_EQ(a.failure_count, 0);
  EXPECT_EQ(a.inference_count, 2);
  EXPECT_EQ(a.queue_ns, 10000);
  EXPECT_EQ(a.compute_ns, 20000);
  EXPECT_EQ(a.ok_calls, 1u);
  EXPECT_EQ(b.success_count, 0);
  EXPECT_EQ(b.failure_count, 1);
  EXPECT_EQ(b.failed_calls, 1u);
  EXPECT_EQ(b.Calls(StatusCode::kInvalidArgument), 1u);

  EXPECT_EQ(metrics.StatsFor("enc", "3"), nullptr);
  EXPECT_EQ(metrics.StatsFor("nope", ""), nullptr);
  const std::string text = metrics.Serialize();
  EXPECT_EQ(metrics.StatsFor("nope", ""), nullptr);
  EXPECT_EQ(text.find("model=\"nope\""), std::string::npos);
  EXPECT_EQ(Sample(text, R"(mha_requests_total{code="OK",model="enc"})"), 1);
  EXPECT_EQ(Sample(text, R"(mha_requests_total{code="INVALID_ARGUMENT",model="enc"})"), 1);
  EXPECT_EQ(Sample(text, R"(mha_protocol_requests_total{code="INVALID_ARGUMENT",protocol="oip"})"),
            1);
  EXPECT_EQ(Sample(text, R"(mha_sessions_open{model="enc",version="2"})"), 0);
}

// Recording takes no lock and loses nothing: threads recording at once add up exactly.
TEST(StatsAggregatorTest, ConcurrentRecordingAddsUpExactly) {
  StatsAggregator stats("enc", "1");
  constexpr int kThreads = 4, kEach = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&stats] {
      for (int i = 0; i < kEach; ++i) {
        stats.RecordRequest(StatusCode::kOk, 0.5);
        stats.RecordBatch(2, 3, 4, 8);
        stats.AddInflight(1);
        stats.AddInflight(-1);
      }
    });
  }
  for (auto& t : threads) t.join();
  const StatsSnapshot s = stats.Read();
  EXPECT_EQ(s.ok_calls, static_cast<uint64_t>(kThreads * kEach));
  EXPECT_EQ(s.request.count, static_cast<uint64_t>(kThreads * kEach));
  EXPECT_EQ(s.request.sum, 0.5 * kThreads * kEach);
  EXPECT_EQ(s.execution_count, kThreads * kEach);
  EXPECT_EQ(s.batch_rows.sum, 3.0 * kThreads * kEach);
  EXPECT_EQ(s.padded_tokens, 8.0 * kThreads * kEach);
  EXPECT_EQ(s.inflight, 0);
}

}  // namespace metrics_test
}  // namespace mha::serve
