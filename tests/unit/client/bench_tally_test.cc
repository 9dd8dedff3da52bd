// BenchTally (client/bench/bench_tally.h), what mha-client bench records per answer: each
// successful call's latency in the order answered beside when it was answered (seconds since
// Start), failed calls counted but not sampled, and the percentiles from the same latencies.
#include "client/bench/bench_tally.h"

#include <gtest/gtest.h>

#include <chrono>

namespace mha::testing {
namespace bench_tally_test {

TEST(BenchTally, SamplesEverySuccessfulAnswerInOrderWithItsTime) {
  client::BenchTally tally;
  const auto before = std::chrono::steady_clock::now();
  tally.Start();
  tally.Record(grpc::Status::OK, 300, nullptr);  // GetModel pings: no response to read
  tally.Record(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down"), 50, nullptr);
  tally.Record(grpc::Status::OK, 100, nullptr);
  tally.Record(grpc::Status::OK, 200, nullptr);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
  const client::BenchReport r = tally.Finish(elapsed);
  EXPECT_EQ(r.ok, 3);
  EXPECT_EQ(r.errors, 1);
  EXPECT_EQ(r.sample_latency_us, (std::vector<double>{300, 100, 200}));  // as answered
  ASSERT_EQ(r.sample_done_s.size(), 3u);
  EXPECT_GE(r.sample_done_s[0], 0.0);
  EXPECT_LE(r.sample_done_s[0], r.sample_done_s[1]);
  EXPECT_LE(r.sample_done_s[1], r.sample_done_s[2]);
  EXPECT_LE(r.sample_done_s[2], elapsed);
  EXPECT_EQ(r.latency.p50_us, 200);
  EXPECT_EQ(r.latency.max_us, 300);
}

}  // namespace bench_tally_test
}  // namespace mha::testing
