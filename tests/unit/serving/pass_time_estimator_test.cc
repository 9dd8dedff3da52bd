// PassTimeEstimator (server/serving/scheduling/pass_time_estimator.h): the measured pass times the
// batcher merges by (deadline-aware merging, docs/batching.md).
#include "server/serving/scheduling/pass_time_estimator.h"

#include <gtest/gtest.h>

namespace mha::serve {
namespace pass_time_estimator_test {

// The batcher's own estimate: an EWMA per power-of-two bucket of padded tokens, forward and
// session passes apart, leaning low where a bucket has no measurement.
TEST(PassTimeEstimatorTest, AveragesPerBucketAndLeansLowElsewhere) {
  PassTimeEstimator e;
  EXPECT_EQ(e.EstimateUs(false, 100), 0.0);  // nothing measured: no estimate
  e.Record(false, 100, 1000);
  EXPECT_DOUBLE_EQ(e.EstimateUs(false, 100), 1000);
  EXPECT_DOUBLE_EQ(e.EstimateUs(false, 120), 1000);   // same bucket [64, 128)
  EXPECT_DOUBLE_EQ(e.EstimateUs(false, 50), 500);     // a larger bucket's, scaled down by tokens
  EXPECT_DOUBLE_EQ(e.EstimateUs(false, 1000), 1000);  // a smaller bucket's, unscaled
  EXPECT_EQ(e.EstimateUs(true, 100), 0.0);            // session passes apart
  e.Record(false, 100, 2000);
  EXPECT_DOUBLE_EQ(e.EstimateUs(false, 100), 1000 + PassTimeEstimator::kAlpha * 1000);
  e.Record(false, 0, 5000);  // ignored
  e.Record(false, 100, -1);  // ignored
  EXPECT_DOUBLE_EQ(e.EstimateUs(false, 100), 1000 + PassTimeEstimator::kAlpha * 1000);
}

}  // namespace pass_time_estimator_test
}  // namespace mha::serve
