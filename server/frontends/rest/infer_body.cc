#include "server/frontends/rest/infer_body.h"

#include <charconv>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "mha/half.h"
#include "mha/shape_string.h"
#include "mha/text.h"
#include "server/frontends/rest/json_body.h"

namespace mha::serve::rest {
namespace {

using nlohmann::json;
using ParameterMap = google::protobuf::Map<std::string, inference::InferParameter>;

// INVALID_ARGUMENT naming the first key of `object` that is not in `allowed`.
Status CheckKeys(const json& object, std::initializer_list<const char*> allowed,
                 const std::string& where) {
  for (const auto& item : object.items()) {
    bool known = false;
    for (const char* a : allowed) known = known || item.key() == a;
    if (known) continue;
    std::string list;
    for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
    return InvalidArgument(where + ": unknown key " + Quoted(item.key()) + " (expected " + list +
                           ")");
  }
  return Status::Ok();
}

StatusOr<inference::InferParameter> ToParameter(const json& value, const std::string& where) {
  inference::InferParameter p;
  if (value.is_boolean()) {
    p.set_bool_param(value.get<bool>());
  } else if (value.is_number_unsigned() &&
             value.get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()}) {
    p.set_uint64_param(value.get<uint64_t>());
  } else if (value.is_number_integer()) {
    p.set_int64_param(value.get<int64_t>());
  } else if (value.is_number_float()) {
    p.set_double_param(value.get<double>());
  } else if (value.is_string()) {
    p.set_string_param(value.get<std::string>());
  } else {
    return InvalidArgument(where + ": must be a boolean, a number or a string");
  }
  return p;
}

// `parameters` (absent or an object) into `out`, but for the REST-only key `own`, whose value
// goes to *own_value (null when absent).
Status ParseParameters(const json& parent, const std::string& where, const char* own,
                       const json** own_value, ParameterMap* out) {
  *own_value = nullptr;
  const auto it = parent.find("parameters");
  if (it == parent.end()) return Status::Ok();
  if (!it->is_object()) return InvalidArgument(where + ".parameters: must be an object");
  for (const auto& item : it->items()) {
    if (item.key() == own) {
      *own_value = &item.value();
      continue;
    }
    auto p = ToParameter(item.value(), where + ".parameters." + Abbreviate(item.key()));
    if (!p.ok()) return p.status();
    (*out)[item.key()] = std::move(p.value());
  }
  return Status::Ok();
}

StatusOr<std::string> RequiredString(const json& object, const char* key,
                                     const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) return InvalidArgument(where + ": " + key + " is required");
  if (!it->is_string()) return InvalidArgument(where + "." + key + ": must be a string");
  return it->get<std::string>();
}

Status ParseShape(const json& input, const std::string& where,
                  inference::ModelInferRequest::InferInputTensor* out) {
  const auto it = input.find("shape");
  if (it == input.end()) return InvalidArgument(where + ": shape is required");
  if (!it->is_array()) return InvalidArgument(where + ".shape: must be an array of integers");
  for (const json& d : *it) {
    if (!d.is_number_integer() ||
        (d.is_number_unsigned() &&
         d.get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()})) {
      return InvalidArgument(where + ".shape: must be an array of integers");
    }
    out->add_shape(d.get<int64_t>());
  }
  return Status::Ok();
}

// The element count of a shape of positive dims; -1 when a dim is not positive or it overflows
// (the decoder then says what is wrong with the shape).
int64_t ElementCount(const inference::ModelInferRequest::InferInputTensor& t) {
  int64_t n = 1;
  for (int64_t d : t.shape()) {
    if (d <= 0 || n > (int64_t{1} << 62) / d) return -1;
    n *= d;
  }
  return n;
}

// JSON data (collected as float32) -> the datatype's raw bytes. Datatypes other than the four
// inputs may have are left to the decoder, which names them (same message as gRPC).
StatusOr<std::string> DataBytes(TensorData& data,
                                const inference::ModelInferRequest::InferInputTensor& t) {
  const std::string& name = t.name();
  const std::string& datatype = t.datatype();
  if (data.non_numbers > 0) {
    return InvalidArgument(name + ": data has " + std::to_string(data.non_numbers) +
                           " values that are neither numbers nor true/false");
  }
  const int64_t needed = ElementCount(t);
  if (needed >= 0 && data.count != needed) {
    const std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    return InvalidArgument(name + ": data has " + std::to_string(data.count) + " values, shape " +
                           ShapeString(shape) + " needs " + std::to_string(needed));
  }
  const bool is_bool = datatype == "BOOL";
  if (is_bool && data.bools != data.count) {
    return InvalidArgument(name + ": datatype BOOL needs data of true/false values");
  }
  if (!is_bool && data.bools > 0) {
    return InvalidArgument(name + ": datatype " + Abbreviate(datatype) +
                           " needs numbers in data, not true/false");
  }
  const auto* values = reinterpret_cast<const float*>(data.floats.data());
  std::string out;
  if (datatype == "FP32") return std::move(data.floats);
  if (datatype == "FP16" || datatype == "BF16") {
    out.resize(static_cast<size_t>(data.count) * 2);
    for (int64_t i = 0; i < data.count; ++i) {
      const uint16_t bits =
          datatype == "FP16" ? FloatToHalfBits(values[i]) : FloatToBFloat16Bits(values[i]);
      std::memcpy(&out[static_cast<size_t>(i) * 2], &bits, 2);
    }
  } else if (is_bool) {
    out.resize(static_cast<size_t>(data.count));
    for (int64_t i = 0; i < data.count; ++i) out[i] = values[i] != 0.0f ? 1 : 0;
  }
  return out;
}

// The bytes of the binary inputs, taken in order.
struct BinaryCursor {
  std::string_view bytes;
  size_t used = 0;
};

Status ParseInput(const json& input, size_t i, TensorData* data, BinaryCursor* binary,
                  inference::ModelInferRequest* r) {
  const std::string where = "inputs[" + std::to_string(i) + "]";
  if (!input.is_object()) return InvalidArgument(where + ": must be an object");
  MHA_RETURN_IF_ERROR(CheckKeys(input, {"name", "shape", "datatype", "parameters", "data"}, where));
  auto* t = r->add_inputs();
  auto name = RequiredString(input, "name", where);
  if (!name.ok()) return name.status();
  t->set_name(*name);
  auto datatype = RequiredString(input, "datatype", where);
  if (!datatype.ok()) return datatype.status();
  t->set_datatype(*datatype);
  MHA_RETURN_IF_ERROR(ParseShape(input, where, t));
  const json* size = nullptr;
  MHA_RETURN_IF_ERROR(
      ParseParameters(input, where, "binary_data_size", &size, t->mutable_parameters()));
  const bool has_data = input.contains("data");
  if (t->parameters().count("shared_memory_region") !=
      0) {  // read from the region (oip/infer_shm.h)
    if (has_data || size != nullptr) {
      return InvalidArgument(where +
                             ": data (or binary_data_size) and "
                             "parameters.shared_memory_region on the same tensor");
    }
    return Status::Ok();
  }
  if (size != nullptr) {
    if (has_data) return InvalidArgument(where + ": both data and parameters.binary_data_size");
    if (!size->is_number_unsigned() ||
        size->get<uint64_t>() > binary->bytes.size() - binary->used) {
      return InvalidArgument(where +
                             ".parameters.binary_data_size: must be a count of bytes, at "
                             "most the " +
                             std::to_string(binary->bytes.size() - binary->used) +
                             " binary bytes left after the JSON header");
    }
    const size_t n = size->get<uint64_t>();
    r->add_raw_input_contents()->assign(binary->bytes.data() + binary->used, n);
    binary->used += n;
    return Status::Ok();
  }
  if (!has_data) {
    return InvalidArgument(where + ": no data (neither data nor parameters.binary_data_size)");
  }
  if (data == nullptr || !data->present) return InvalidArgument(where + ".data: must be an array");
  if (data->repeated) return InvalidArgument(where + ": data given twice");
  auto bytes = DataBytes(*data, *t);
  if (!bytes.ok()) return bytes.status();
  *r->add_raw_input_contents() = std::move(bytes.value());
  return Status::Ok();
}

Status ParseOutputs(const json& outputs, InferBody* out) {
  if (!outputs.is_array()) return InvalidArgument("outputs: must be an array");
  for (size_t i = 0; i < outputs.size(); ++i) {
    const json& o = outputs[i];
    const std::string where = "outputs[" + std::to_string(i) + "]";
    if (!o.is_object()) return InvalidArgument(where + ": must be an object");
    MHA_RETURN_IF_ERROR(CheckKeys(o, {"name", "parameters"}, where));
    auto name = RequiredString(o, "name", where);
    if (!name.ok()) return name.status();
    auto* requested = out->request.add_outputs();
    requested->set_name(*name);
    const json* binary = nullptr;
    MHA_RETURN_IF_ERROR(
        ParseParameters(o, where, "binary_data", &binary, requested->mutable_parameters()));
    if (binary == nullptr) continue;
    if (!binary->is_boolean()) {
      return InvalidArgument(where + ".parameters.binary_data: must be true or false");
    }
    out->binary_output[*name] = binary->get<bool>();
  }
  return Status::Ok();
}

// The JSON part's length from the header: the whole body when absent.
StatusOr<size_t> JsonLength(std::string_view body, const std::optional<std::string>& header) {
  if (!header) return body.size();
  size_t n = 0;
  const char* end = header->data() + header->size();
  const auto [ptr, ec] = std::from_chars(header->data(), end, n);
  if (ec != std::errc() || ptr != end || header->empty() || n > body.size()) {
    return InvalidArgument(std::string(kHeaderLengthHeader) + ": '" + Abbreviate(*header) +
                           "' is not a length within the body's " + std::to_string(body.size()) +
                           " bytes");
  }
  return n;
}

Status ParseDocument(ParsedBody& parsed, BinaryCursor* binary, InferBody* out) {
  const json& doc = parsed.document;
  if (!doc.is_object()) return InvalidArgument("request body: must be a JSON object");
  MHA_RETURN_IF_ERROR(CheckKeys(doc, {"id", "parameters", "inputs", "outputs"}, "request"));
  if (const auto id = doc.find("id"); id != doc.end()) {
    if (!id->is_string()) return InvalidArgument("id: must be a string");
    out->request.set_id(id->get<std::string>());
  }
  const json* binary_output = nullptr;
  MHA_RETURN_IF_ERROR(ParseParameters(doc, "request", "binary_data_output", &binary_output,
                                      out->request.mutable_parameters()));
  if (binary_output != nullptr) {
    if (!binary_output->is_boolean()) {
      return InvalidArgument("parameters.binary_data_output: must be true or false");
    }
    out->binary_data_output = binary_output->get<bool>();
  }
  const auto inputs = doc.find("inputs");
  if (inputs == doc.end() || !inputs->is_array()) {
    return InvalidArgument("inputs: required, an array of tensors");
  }
  for (size_t i = 0; i < inputs->size(); ++i) {
    TensorData* data = i < parsed.data.size() ? &parsed.data[i] : nullptr;
    MHA_RETURN_IF_ERROR(ParseInput((*inputs)[i], i, data, binary, &out->request));
  }
  if (const auto outputs = doc.find("outputs"); outputs != doc.end()) {
    MHA_RETURN_IF_ERROR(ParseOutputs(*outputs, out));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<InferBody> ParseInferBody(std::string_view body,
                                   const std::optional<std::string>& header_length,
                                   const InferBodyLimits& limits) {
  auto json_length = JsonLength(body, header_length);
  if (!json_length.ok()) return json_length.status();
  auto parsed = ParseJsonBody(body.substr(0, *json_length), {limits.max_depth, limits.max_values});
  if (!parsed.ok()) return parsed.status();
  BinaryCursor binary{body.substr(*json_length)};
  InferBody out;
  MHA_RETURN_IF_ERROR(ParseDocument(parsed.value(), &binary, &out));
  if (binary.used != binary.bytes.size()) {
    return InvalidArgument("binary data: " + std::to_string(binary.bytes.size()) +
                           " bytes follow the JSON header, the inputs' binary_data_size add up "
                           "to " +
                           std::to_string(binary.used));
  }
  return out;
}

}  // namespace mha::serve::rest
