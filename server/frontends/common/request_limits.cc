#include "server/frontends/common/request_limits.h"

namespace mha::serve {

Status CheckMessageBytes(size_t bytes, int64_t max_message_bytes) {
  if (static_cast<int64_t>(bytes) <= max_message_bytes) return Status::Ok();
  return ResourceExhausted("request is " + std::to_string(bytes) +
                           " bytes, over --max-message-bytes " + std::to_string(max_message_bytes));
}

Status CheckModelVersion(const std::string& version) {
  if (version.size() <= kMaxModelVersionBytes) return Status::Ok();
  return InvalidArgument("model_version: " + std::to_string(version.size()) +
                         " bytes, a version is at most " + std::to_string(kMaxModelVersionBytes) +
                         " (\"3\"; \"\" = the newest)");
}

}  // namespace mha::serve
