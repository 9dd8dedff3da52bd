// Private to mha_core: the nesting bound of the JSON files core parses (config.json, the
// safetensors header). Values quoted in errors: mha::JsonForMessage (mha/config_reader.h).
#pragma once

#include <string>
#include <string_view>

namespace mha::internal {

// Deepest nesting of objects and arrays accepted in a JSON file we read (config.json, the
// safetensors header). nlohmann builds the tree iteratively but copies and compares it
// recursively, so a 100k-deep document overflows the stack later; ours nest 3 levels at most.
inline constexpr int kMaxJsonDepth = 64;

// The nesting depth of `text` (brackets outside strings), counted before any parse; stops at the
// first level past `limit` and returns it, so a hostile file costs one bounded scan.
inline int JsonNestingDepth(std::string_view text, int limit = kMaxJsonDepth) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > deepest) deepest = depth;
      if (deepest > limit) return deepest;
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

// "<path>: <what> nests deeper than 64 levels" when `text` does; empty when it does not.
inline std::string JsonDepthError(std::string_view text, const std::string& path,
                                  const std::string& what) {
  if (JsonNestingDepth(text) <= kMaxJsonDepth) return "";
  return path + ": " + what + " nests objects/arrays deeper than " + std::to_string(kMaxJsonDepth) +
         " levels (refused before parsing)";
}

}  // namespace mha::internal
