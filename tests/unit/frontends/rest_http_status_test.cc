// The REST front end's one status converter (http_status.h): each code's HTTP status, and the
// {"error": ...} body.
#include <gtest/gtest.h>

#include "server/frontends/rest/http_status.h"

namespace mha::serve::rest {
namespace rest_http_status_test {

TEST(RestHttpStatus, OneConverterForEveryCode) {
  EXPECT_EQ(HttpStatusOf(Status::Ok()), 200);
  EXPECT_EQ(HttpStatusOf(InvalidArgument("x")), 400);
  EXPECT_EQ(HttpStatusOf(FailedPrecondition("x")), 400);
  EXPECT_EQ(HttpStatusOf(NotFound("x")), 404);
  EXPECT_EQ(HttpStatusOf(Unavailable("x")), 503);
  EXPECT_EQ(HttpStatusOf(ResourceExhausted("queue full: 3 requests waiting")), 429);
  EXPECT_EQ(HttpStatusOf(ResourceExhausted("KV cache full: 2 blocks")), 429);
  EXPECT_EQ(HttpStatusOf(ResourceExhausted("request is 9 bytes, over --max-message-bytes 8")), 413);
  EXPECT_EQ(HttpStatusOf(DeadlineExceeded("x")), 504);
  EXPECT_EQ(HttpStatusOf(Unauthenticated("x")), 401);
  EXPECT_EQ(HttpStatusOf(Internal("x")), 500);
  EXPECT_EQ(ErrorBody(NotFound("model 'a\"b' not found")), R"({"error":"model 'a\"b' not found"})");
}

}  // namespace rest_http_status_test
}  // namespace mha::serve::rest
