// W3C trace context (trace_context.h): only valid traceparent headers give a trace id.
#include "server/frontends/common/trace_context.h"

#include <gtest/gtest.h>

namespace mha::serve {
namespace trace_context_test {

TEST(TraceContext, ValidTraceparentsOnly) {
  EXPECT_EQ(TraceIdOf("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(TraceIdOf("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"), "");
  EXPECT_EQ(TraceIdOf("00-00000000000000000000000000000000-00f067aa0ba902b7-01"), "");
  EXPECT_EQ(TraceIdOf("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), "");
  EXPECT_EQ(TraceIdOf("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x"), "");
  EXPECT_EQ(TraceIdOf("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x"),
            "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(TraceIdOf(""), "");
}

}  // namespace trace_context_test
}  // namespace mha::serve
