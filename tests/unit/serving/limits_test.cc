// CheckPassBytes (server/serving/limits.h): the one refusal of a pass over --max-response-bytes
// or --max-work-bytes, the response checked first, naming the estimate, the limit, what and how.
#include "server/serving/limits.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace mha::serve {
namespace {

using testing::Contains;

TEST(CheckPassBytes, WithinBothLimitsIsOk) {
  RequestLimits limits;
  limits.max_work_bytes = 1000;
  limits.max_response_bytes = 100;
  EXPECT_TRUE(CheckPassBytes({1000, 100}, limits, "step", "send less").ok());
}

TEST(CheckPassBytes, NamesTheEstimateTheLimitWhatAndHow) {
  RequestLimits limits;
  limits.max_work_bytes = 1000;
  limits.max_response_bytes = 100;
  const Status work = CheckPassBytes({1001, 100}, limits, "step [1, 2 new tokens]", "send less");
  EXPECT_EQ(work.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(work.message(),
            "step [1, 2 new tokens]: the pass would need about 1001 bytes of working memory, over "
            "--max-work-bytes 1000: send less");
  const Status both = CheckPassBytes({5000, 101}, limits, "", "send less");
  EXPECT_EQ(both.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(both.message(),
            "the response would be 101 bytes, over --max-response-bytes 100: send less");
  EXPECT_FALSE(Contains(both.message(), "--max-work-bytes")) << "the response is checked first";
}

}  // namespace
}  // namespace mha::serve
