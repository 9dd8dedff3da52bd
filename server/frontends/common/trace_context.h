// W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` header (HTTP) or
// metadata key (gRPC), "00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>". Front ends log
// its trace id with the request id and echo the header back unchanged; a malformed value is
// ignored, as the specification asks (no echo, no trace id). No tracing library: nothing here
// starts spans.
#pragma once

#include <string>
#include <string_view>

namespace mha::serve {

// The trace id of a valid traceparent; "" when `value` is not one (wrong length or shape,
// upper-case or non-hex digits, version ff, an all-zero trace or parent id). Versions above 00
// may append fields ("-..."), which are allowed.
inline std::string TraceIdOf(std::string_view value) {
  const auto hex = [](std::string_view s) {
    for (char c : s) {
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    }
    return true;
  };
  const auto zeros = [](std::string_view s) { return s.find_first_not_of('0') == s.npos; };
  if (value.size() < 55 || value[2] != '-' || value[35] != '-' || value[52] != '-') return "";
  const std::string_view version = value.substr(0, 2), trace = value.substr(3, 32),
                         parent = value.substr(36, 16), flags = value.substr(53, 2);
  if (!hex(version) || !hex(trace) || !hex(parent) || !hex(flags) || version == "ff") return "";
  if (zeros(trace) || zeros(parent)) return "";
  if (value.size() > 55 && (version == "00" || value[55] != '-')) return "";
  return std::string(trace);
}

}  // namespace mha::serve
