// Typed, range-checked reads of the keys of one parsed config.json object, with one error text:
// "<path>: '<key>' must be <wanted>, got <value>". Core reads its keys with it (model_config.h);
// the serving layer reads its own (server/serving/repository/serving_config.h).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

#include "mha/status.h"

namespace mha {

// An untrusted JSON value quoted in an error message. nlohmann's dump() recurses once per nesting
// level, so dumping a value from a hostile file ([[[[...]]]] 100k deep) overflows the stack; and a
// long string would be echoed whole. Scalars are dumped (cut to 64 characters), arrays and
// objects only named.
std::string JsonForMessage(const nlohmann::json& value);

// Each read leaves *out as it is when the key is absent. `path` and `json` must outlive it.
class ConfigReader {
 public:
  ConfigReader(const std::string& path, const nlohmann::json& json) : path_(path), json_(json) {}

  Status Int(const char* key, int64_t minimum, int64_t maximum, std::optional<int64_t>* out) const;
  // Any JSON number (an integer too: "rope_theta": 10000) in [minimum, maximum].
  Status Number(const char* key, double minimum, double maximum, std::optional<double>* out) const;
  Status Bool(const char* key, std::optional<bool>* out) const;
  Status String(const char* key, std::optional<std::string>* out) const;
  // A string, or an integer written as one ("version": 3).
  Status Label(const char* key, std::optional<std::string>* out) const;
  // INVALID_ARGUMENT "<path>: '<key>' must be <wanted>, got <the key's value>".
  Status Error(const char* key, const std::string& wanted) const;

 private:
  const nlohmann::json* Find(const char* key) const;

  const std::string& path_;
  const nlohmann::json& json_;
};

}  // namespace mha
