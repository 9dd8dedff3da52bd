// What a server accepts per request, whatever the protocol and the model kind: one struct, filled
// from the flags once (server/app/config.cc), and the one refusal of a request, step or message
// whose estimated working memory or response is over its limit. Each kind estimates the bytes its
// passes take, in its own folder under kinds/ (budget.h has what they share); the words of the
// refusal are these.
#pragma once

#include <cstdint>
#include <string>

#include "mha/status.h"
#include "server/serving/serving_defaults.h"

namespace mha::serve {

struct RequestLimits {
  int64_t max_batch_size = 64;         // --max-batch-size: B of one request or session
  int64_t max_sequence_length = 4096;  // --max-sequence-length: T and S, a session's tokens
  // --max-response-bytes: the encoded response (output + weights), well under protobuf's 2 GiB
  // message limit.
  int64_t max_response_bytes = kDefaultMaxResponseBytes;
  // --max-work-bytes: the estimated working memory of one pass, a merged pass included.
  int64_t max_work_bytes = kDefaultMaxWorkBytes;
};

// What one pass (a request's, a step's, a message's) is estimated to cost.
struct PassBytes {
  int64_t work = 0;      // peak working memory
  int64_t response = 0;  // the encoded answer
};

// RESOURCE_EXHAUSTED when `bytes` is over either limit: "<what>: the response would be N bytes,
// over --max-response-bytes L: <how>" (checked first) or "<what>: the pass would need about N
// bytes of working memory, over --max-work-bytes L: <how>". `what` names the request ("step [2,
// 1 new tokens, 512 keys]"; "" for a stateless forward), `how` says how to get under the limit.
Status CheckPassBytes(const PassBytes& bytes, const RequestLimits& limits, const std::string& what,
                      const std::string& how);

}  // namespace mha::serve
