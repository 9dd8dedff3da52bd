// A KServe v2 REST client written here from the specification (cpp-httplib's client), for the
// service tests of server/frontends/rest: request bodies in JSON (flattened or nested `data`) and
// in the binary tensor extension, and the answer's outputs read back as tensors.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "test_util.h"

namespace mha::testing {

// `t` (on the CPU, contiguous) as nested JSON arrays of its values, row-major.
inline nlohmann::json NestedData(const at::Tensor& t) {
  if (t.dim() == 0) {
    return t.scalar_type() == at::kBool ? nlohmann::json(t.item<bool>())
                                        : nlohmann::json(t.item<double>());
  }
  nlohmann::json out = nlohmann::json::array();
  for (int64_t i = 0; i < t.size(0); ++i) out.push_back(NestedData(t[i]));
  return out;
}

// The values of `t` flattened, row-major.
inline nlohmann::json FlatData(const at::Tensor& t) {
  return NestedData(t.cpu().contiguous().reshape({-1}));
}

enum class TensorForm { kFlat, kNested, kBinary };

// Adds input `name` to body["inputs"]; binary bytes go to *binary.
inline void AddRestInput(const char* name, const at::Tensor& tensor, TensorForm form,
                         nlohmann::json* body, std::string* binary) {
  if (!tensor.defined()) return;
  const at::Tensor t = tensor.cpu().contiguous();
  nlohmann::json input = {
      {"name", name}, {"datatype", OipDatatype(t.scalar_type())}, {"shape", t.sizes().vec()}};
  if (form == TensorForm::kBinary) {
    const size_t n = static_cast<size_t>(t.numel()) * t.element_size();
    input["parameters"] = {{"binary_data_size", n}};
    binary->append(static_cast<const char*>(t.data_ptr()), n);
  } else {
    input["data"] = form == TensorForm::kFlat ? FlatData(t) : NestedData(t);
  }
  (*body)["inputs"].push_back(std::move(input));
}

// A client of a server's REST port on loopback (reads may take 60 s: big answers, a loaded box).
inline std::unique_ptr<httplib::Client> RestClient(int port) {
  auto http = std::make_unique<httplib::Client>("127.0.0.1", port);
  http->set_read_timeout(60, 0);
  return http;
}

// An answer's JSON text parsed by nlohmann, which knows no NaN or infinities: the bare tokens
// NaN, Infinity and -Infinity that the server writes for them (as Python's json does) are read as
// the strings "NaN", "Infinity", "-Infinity" (JsonFloat reads them back). Written here, apart from
// the server's parser, so that the tests do not take the server's word for its own output.
inline nlohmann::json ParseAnswerJson(const std::string& text) {
  std::string quoted;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      quoted += c;
      continue;
    }
    in_string = c == '"';
    const char* token = nullptr;
    for (const char* t : {"-Infinity", "Infinity", "NaN"}) {
      if (text.compare(i, std::strlen(t), t) == 0) token = t;
      if (token) break;
    }
    if (token == nullptr) {
      quoted += c;
      continue;
    }
    quoted += std::string("\"") + token + "\"";
    i += std::strlen(token) - 1;
  }
  return nlohmann::json::parse(quoted, nullptr, false);
}

// A value of `data` as a float: a number, or one of the non-finite tokens (ParseAnswerJson).
inline float JsonFloat(const nlohmann::json& v) {
  if (!v.is_string()) return v.get<float>();
  const std::string s = v.get<std::string>();
  EXPECT_TRUE(s == "NaN" || s == "Infinity" || s == "-Infinity") << s;
  return s == "NaN" ? std::nanf("") : s == "Infinity" ? INFINITY : -INFINITY;
}

struct RestAnswer {
  int status = 0;  // 0 = no HTTP answer
  nlohmann::json json;
  std::string text;    // the JSON as the server wrote it
  std::string binary;  // bytes after the JSON (binary outputs)
  httplib::Headers headers;
};

// One request on `client`; the body's JSON is the first `header_length` bytes when set.
inline RestAnswer RestCall(httplib::Client& client, const std::string& method,
                           const std::string& path, const std::string& body = "",
                           std::optional<size_t> header_length = std::nullopt,
                           httplib::Headers headers = {}) {
  if (header_length) {
    headers.emplace("Inference-Header-Content-Length", std::to_string(*header_length));
  }
  auto result = method == "GET"
                    ? client.Get(path.c_str(), headers)
                    : client.Post(path.c_str(), headers, body,
                                  header_length ? "application/octet-stream" : "application/json");
  RestAnswer answer;
  if (!result) return answer;
  answer.status = result->status;
  answer.headers = result->headers;
  size_t json_length = result->body.size();
  if (result->has_header("Inference-Header-Content-Length")) {
    json_length = std::stoul(result->get_header_value("Inference-Header-Content-Length"));
  }
  answer.text = result->body.substr(0, json_length);
  answer.json = ParseAnswerJson(answer.text);
  answer.binary = result->body.substr(std::min(json_length, result->body.size()));
  return answer;
}

// Output `name` of an infer answer as a float tensor (from `data` or from the binary part);
// undefined when the answer has no such output.
inline at::Tensor RestOutput(const RestAnswer& a, const std::string& name) {
  if (!a.json.contains("outputs")) return {};
  size_t offset = 0;
  for (const auto& o : a.json["outputs"]) {
    const size_t size = o.contains("parameters") && o["parameters"].contains("binary_data_size")
                            ? o["parameters"]["binary_data_size"].get<size_t>()
                            : 0;
    if (o["name"] != name) {
      offset += size;
      continue;
    }
    EXPECT_EQ(o["datatype"], "FP32") << name;
    const auto shape = o["shape"].get<std::vector<int64_t>>();
    at::Tensor out = at::empty(shape, at::kFloat);
    if (o.contains("data")) {
      std::vector<float> values;
      for (const auto& v : o["data"]) values.push_back(JsonFloat(v));
      EXPECT_EQ(static_cast<int64_t>(values.size()), out.numel()) << name;
      if (static_cast<int64_t>(values.size()) != out.numel()) return {};
      std::memcpy(out.data_ptr(), values.data(), values.size() * sizeof(float));
      return out;
    }
    EXPECT_EQ(size, static_cast<size_t>(out.numel()) * sizeof(float)) << name;
    if (size != static_cast<size_t>(out.numel()) * sizeof(float) ||
        offset + size > a.binary.size()) {
      return {};
    }
    std::memcpy(out.data_ptr(), a.binary.data() + offset, size);
    return out;
  }
  return {};
}

// The message of an {"error": ...} answer ("" when it is not one).
inline std::string RestError(const RestAnswer& a) {
  return a.json.is_object() && a.json.contains("error") && a.json["error"].is_string()
             ? a.json["error"].get<std::string>()
             : "";
}

}  // namespace mha::testing
