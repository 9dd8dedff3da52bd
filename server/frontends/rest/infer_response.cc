#include "server/frontends/rest/infer_response.h"

#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>

#include "mha/half.h"
#include "server/frontends/rest/json_nonfinite.h"
#include "server/frontends/rest/proto_json.h"

namespace mha::serve::rest {
namespace {

using nlohmann::json;

template <typename T>
T Load(const std::string& raw, size_t i) {
  T v;
  std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));
  return v;
}

void AppendFloat(float v, std::string* out) {
  if (const char* token = NonFiniteToken(v)) {
    out->append(token);
    return;
  }
  char buf[32];
  const auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round trip
  out->append(buf, ec == std::errc() ? ptr : buf);
}

template <typename T>
void AppendInteger(T v, std::string* out) {
  char buf[24];
  const auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, ec == std::errc() ? ptr : buf);
}

// The raw bytes of one output as a JSON array of its values.
void AppendData(const std::string& datatype, const std::string& raw, std::string* out) {
  out->push_back('[');
  size_t size = datatype == "FP32" || datatype == "INT32" ? 4
                : datatype == "INT64"                     ? 8
                : datatype == "BOOL"                      ? 1
                                                          : 2;
  const size_t n = raw.size() / size;
  out->reserve(out->size() + n * 12);
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out->push_back(',');
    if (datatype == "FP32") {
      AppendFloat(Load<float>(raw, i), out);
    } else if (datatype == "FP16") {
      AppendFloat(HalfBitsToFloat(Load<uint16_t>(raw, i)), out);
    } else if (datatype == "BF16") {
      AppendFloat(BFloat16BitsToFloat(Load<uint16_t>(raw, i)), out);
    } else if (datatype == "INT32") {
      AppendInteger(Load<int32_t>(raw, i), out);
    } else if (datatype == "INT64") {
      AppendInteger(Load<int64_t>(raw, i), out);
    } else {
      out->append(raw[i] != 0 ? "true" : "false");
    }
  }
  out->push_back(']');
}

// `object` dumped without its closing brace, so that more members can follow.
std::string Open(const json& object) {
  std::string text = DumpJson(object);
  text.pop_back();
  return text;
}

}  // namespace

RestResponse EncodeInferResponse(inference::ModelInferResponse* response,
                                 const InferBody& request) {
  json head = {{"model_name", response->model_name()},
               {"model_version", response->model_version()}};
  if (!response->id().empty()) head["id"] = response->id();
  json parameters = json::object();
  for (const auto& [key, value] : response->parameters()) {
    const json p = ProtoToJson(value);  // {"int64_param": N}: the one value it holds
    if (!p.empty()) parameters[key] = p.begin().value();
  }
  head["parameters"] = std::move(parameters);
  RestResponse out;
  std::string binary;
  bool any_binary = false;
  out.body = Open(head) + ",\"outputs\":[";
  for (int i = 0; i < response->outputs_size(); ++i) {
    const auto& o = response->outputs(i);
    std::string* raw = response->mutable_raw_output_contents(i);
    json meta = {{"name", o.name()}, {"datatype", o.datatype()}, {"shape", json::array()}};
    for (int64_t d : o.shape()) meta["shape"].push_back(d);
    if (i > 0) out.body.push_back(',');
    if (o.parameters().count("shared_memory_region") != 0) {  // written into the region
      meta["parameters"] = json::object();
      for (const auto& [key, value] : o.parameters()) {
        const json p = ProtoToJson(value);
        if (!p.empty()) meta["parameters"][key] = p.begin().value();
      }
      out.body += DumpJson(meta);
    } else if (request.Binary(o.name())) {
      any_binary = true;
      meta["parameters"] = {{"binary_data_size", raw->size()}};
      out.body += DumpJson(meta);
      binary += *raw;
    } else {
      out.body += Open(meta) + ",\"data\":";
      AppendData(o.datatype(), *raw, &out.body);
      out.body.push_back('}');
    }
    std::string().swap(*raw);
  }
  out.body += "]}";
  if (any_binary) {
    out.header_length = out.body.size();
    out.body += binary;
  }
  return out;
}

}  // namespace mha::serve::rest
