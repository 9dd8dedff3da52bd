#include "server/serving/limits.h"

namespace mha::serve {

Status CheckPassBytes(const PassBytes& bytes, const RequestLimits& limits, const std::string& what,
                      const std::string& how) {
  const std::string prefix = what.empty() ? "" : what + ": ";
  if (bytes.response > limits.max_response_bytes) {
    return ResourceExhausted(prefix + "the response would be " + std::to_string(bytes.response) +
                             " bytes, over --max-response-bytes " +
                             std::to_string(limits.max_response_bytes) + ": " + how);
  }
  if (bytes.work > limits.max_work_bytes) {
    return ResourceExhausted(prefix + "the pass would need about " + std::to_string(bytes.work) +
                             " bytes of working memory, over --max-work-bytes " +
                             std::to_string(limits.max_work_bytes) + ": " + how);
  }
  return Status::Ok();
}

}  // namespace mha::serve
