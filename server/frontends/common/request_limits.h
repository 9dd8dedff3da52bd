// The front ends' own request limits, checked in one place whatever the protocol (the model's
// shape limits are ServerCore's): the message size against --max-message-bytes and the length of
// the requested model version.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mha/status.h"

namespace mha::serve {

inline constexpr size_t kMaxModelVersionBytes = 64;

// RESOURCE_EXHAUSTED "request is N bytes, over --max-message-bytes M" when bytes > max.
Status CheckMessageBytes(size_t bytes, int64_t max_message_bytes);

// INVALID_ARGUMENT "model_version: N bytes, a version is at most 64 (...)" for a longer version.
Status CheckModelVersion(const std::string& version);

}  // namespace mha::serve
