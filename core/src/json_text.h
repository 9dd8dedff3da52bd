// Private to mha_core: untrusted JSON values quoted in error messages. nlohmann's dump() recurses
// once per nesting level, so dumping a value from a hostile file ([[[[...]]]] 100k deep) overflows
// the stack; and a long string would be echoed whole. Scalars are dumped (cut to 64 characters),
// arrays and objects only named.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace mha::internal {

inline std::string JsonForMessage(const nlohmann::json& value) {
  if (value.is_array()) return "an array of " + std::to_string(value.size());
  if (value.is_object()) return "an object of " + std::to_string(value.size()) + " keys";
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > 64) text = text.substr(0, 64) + "...";
  return text;
}

}  // namespace mha::internal
