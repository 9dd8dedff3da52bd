#include "mha/config_reader.h"

#include <nlohmann/json.hpp>

namespace mha {

using Json = nlohmann::json;

std::string JsonForMessage(const Json& value) {
  if (value.is_array()) return "an array of " + std::to_string(value.size());
  if (value.is_object()) return "an object of " + std::to_string(value.size()) + " keys";
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 64) text = text.substr(0, 64) + "...";
  return text;
}

const Json* ConfigReader::Find(const char* key) const {
  auto it = json_.find(key);
  return it == json_.end() ? nullptr : &*it;
}

Status ConfigReader::Int(const char* key, int64_t minimum, int64_t maximum,
                         std::optional<int64_t>* out) const {
  const Json* v = Find(key);
  if (!v) return Status::Ok();
  if (!v->is_number_integer() || v->get<int64_t>() < minimum || v->get<int64_t>() > maximum ||
      (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(maximum))) {
    return Error(
        key, "an integer in [" + std::to_string(minimum) + ", " + std::to_string(maximum) + "]");
  }
  *out = v->get<int64_t>();
  return Status::Ok();
}

Status ConfigReader::Number(const char* key, double minimum, double maximum,
                            std::optional<double>* out) const {
  const Json* v = Find(key);
  if (!v) return Status::Ok();
  if (!v->is_number() || !(v->get<double>() >= minimum && v->get<double>() <= maximum)) {
    return Error(key, "a number in [" + JsonForMessage(Json(minimum)) + ", " +
                          JsonForMessage(Json(maximum)) + "]");
  }
  *out = v->get<double>();
  return Status::Ok();
}

Status ConfigReader::Bool(const char* key, std::optional<bool>* out) const {
  const Json* v = Find(key);
  if (!v) return Status::Ok();
  if (!v->is_boolean()) return Error(key, "a boolean");
  *out = v->get<bool>();
  return Status::Ok();
}

Status ConfigReader::String(const char* key, std::optional<std::string>* out) const {
  const Json* v = Find(key);
  if (!v) return Status::Ok();
  if (!v->is_string()) return Error(key, "a string");
  *out = v->get<std::string>();
  return Status::Ok();
}

Status ConfigReader::Label(const char* key, std::optional<std::string>* out) const {
  const Json* v = Find(key);
  if (!v) return Status::Ok();
  if (v->is_number_integer()) {
    *out = std::to_string(v->get<int64_t>());
    return Status::Ok();
  }
  return String(key, out);
}

Status ConfigReader::Error(const char* key, const std::string& wanted) const {
  return InvalidArgument(path_ + ": '" + key + "' must be " + wanted + ", got " +
                         JsonForMessage(json_.at(key)));
}

}  // namespace mha
