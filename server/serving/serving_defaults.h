// The defaults that several option structs share, once: each setting has one value here and one
// flag name (server/app/config.cc).
#pragma once

#include <cstdint>

namespace mha::serve {

// --max-message-bytes: a request message (gRPC) or body (REST) above it is refused.
inline constexpr int64_t kDefaultMaxMessageBytes = int64_t{64} << 20;
// --max-work-bytes: the estimated working memory of one pass (budget.h), merged or alone.
inline constexpr int64_t kDefaultMaxWorkBytes = int64_t{4} << 30;
// --max-response-bytes: the encoded response, well under protobuf's 2 GiB message limit.
inline constexpr int64_t kDefaultMaxResponseBytes = int64_t{1} << 30;

}  // namespace mha::serve
