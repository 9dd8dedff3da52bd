// Wire compatibility of the Open Inference Protocol front end with the specification, without
// trusting our own .proto: requests are encoded byte by byte with the field numbers written in
// the specification text (triton-inference-server/common protobuf/grpc_service.proto, KServe's
// grpc_predict_v2.proto), parsed with the generated class and decoded by
// DecodeModelInferRequest; responses are encoded by EncodeModelInferResponse, serialized and
// read back field by field with the specification's numbers.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "inference/grpc_service.pb.h"
#include "mha/tensor_adapter.h"
#include "server/frontends/oip/infer_request.h"

namespace mha::testing {
namespace oip_wire_compat_test {

using serve::InferenceResponse;
using serve::oip::DecodeModelInferRequest;
using serve::oip::DecodeOptions;
using serve::oip::OutputTensor;

// Field numbers as the specification text gives them.
namespace spec {
// message ModelInferRequest
constexpr int kRequestModelName = 1, kRequestModelVersion = 2, kRequestId = 3;
constexpr int kRequestParameters = 4, kRequestInputs = 5, kRequestOutputs = 6;
constexpr int kRequestRawInputContents = 7;
// message ModelInferRequest.InferInputTensor
constexpr int kInputName = 1, kInputDatatype = 2, kInputShape = 3, kInputContents = 5;
// message ModelInferRequest.InferRequestedOutputTensor
constexpr int kRequestedOutputName = 1;
// message InferTensorContents
constexpr int kBoolContents = 1, kFp32Contents = 6;
// message InferParameter (oneof parameter_choice)
constexpr int kBoolParam = 1;
// map<string, InferParameter> entries: key = 1, value = 2 (the protobuf map encoding)
constexpr int kMapKey = 1, kMapValue = 2;
// message ModelInferResponse
constexpr int kResponseModelName = 1, kResponseModelVersion = 2, kResponseId = 3;
constexpr int kResponseParameters = 4, kResponseOutputs = 5, kResponseRawOutputContents = 6;
// message ModelInferResponse.InferOutputTensor
constexpr int kOutputName = 1, kOutputDatatype = 2, kOutputShape = 3;
}  // namespace spec

// Protobuf wire format by hand: varint (type 0), length-delimited (2), 32-bit (5).
class WireWriter {
 public:
  WireWriter& Varint(int field, uint64_t value) {
    Tag(field, 0);
    PutVarint(value, &out_);
    return *this;
  }
  WireWriter& Bytes(int field, std::string_view bytes) {
    Tag(field, 2);
    PutVarint(bytes.size(), &out_);
    out_.append(bytes);
    return *this;
  }
  WireWriter& Message(int field, const WireWriter& message) { return Bytes(field, message.str()); }
  WireWriter& PackedInt64(int field, const std::vector<int64_t>& values) {
    std::string body;
    for (int64_t v : values) PutVarint(static_cast<uint64_t>(v), &body);
    return Bytes(field, body);
  }
  WireWriter& PackedFloat(int field, const std::vector<float>& values) {
    return Bytes(field, std::string_view(reinterpret_cast<const char*>(values.data()),
                                         values.size() * sizeof(float)));
  }
  WireWriter& Fixed32Float(int field, float value) {  // one unpacked repeated-float element
    Tag(field, 5);
    out_.append(reinterpret_cast<const char*>(&value), sizeof(float));
    return *this;
  }
  const std::string& str() const { return out_; }

 private:
  static void PutVarint(uint64_t value, std::string* out) {
    while (value >= 0x80) {
      out->push_back(static_cast<char>((value & 0x7f) | 0x80));
      value >>= 7;
    }
    out->push_back(static_cast<char>(value));
  }
  void Tag(int field, int wire_type) {
    PutVarint((static_cast<uint64_t>(field) << 3) | wire_type, &out_);
  }
  std::string out_;
};

WireWriter BoolParameter(const std::string& name, bool value) {
  WireWriter parameter;
  parameter.Varint(spec::kBoolParam, value ? 1 : 0);
  WireWriter entry;
  entry.Bytes(spec::kMapKey, name).Message(spec::kMapValue, parameter);
  return entry;
}

WireWriter InputHeader(const std::string& name, const std::string& datatype,
                       const std::vector<int64_t>& shape) {
  WireWriter input;
  input.Bytes(spec::kInputName, name)
      .Bytes(spec::kInputDatatype, datatype)
      .PackedInt64(spec::kInputShape, shape);
  return input;
}

at::Tensor BoolTensor(std::vector<int64_t> values, std::vector<int64_t> shape) {
  return at::tensor(values).to(at::kBool).reshape(shape);
}

std::string FloatBytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

// Top-level fields of a serialized message, in order.
struct WireField {
  int number = 0;
  int type = 0;
  uint64_t varint = 0;
  std::string bytes;
};

uint64_t GetVarint(std::string_view* in) {
  uint64_t value = 0;
  for (int shift = 0; !in->empty(); shift += 7) {
    const auto byte = static_cast<unsigned char>(in->front());
    in->remove_prefix(1);
    value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) break;
  }
  return value;
}

std::vector<WireField> ReadFields(std::string_view in) {
  std::vector<WireField> fields;
  while (!in.empty()) {
    WireField f;
    const uint64_t tag = GetVarint(&in);
    f.number = static_cast<int>(tag >> 3);
    f.type = static_cast<int>(tag & 7);
    if (f.type == 0) {
      f.varint = GetVarint(&in);
    } else if (f.type == 2) {
      const size_t size = GetVarint(&in);
      f.bytes = std::string(in.substr(0, size));
      in.remove_prefix(size);
    } else {
      ADD_FAILURE() << "unexpected wire type " << f.type << " for field " << f.number;
      break;
    }
    fields.push_back(f);
  }
  return fields;
}

std::vector<int64_t> PackedInt64s(std::string_view in) {
  std::vector<int64_t> values;
  while (!in.empty()) values.push_back(static_cast<int64_t>(GetVarint(&in)));
  return values;
}

TEST(OipWireCompat, RawRequestFromSpecificationNumbersDecodesAsIntended) {
  const std::vector<float> query = {1, 2, 3, 4, 5, 6, 7, 8};  // [1, 2, 4]
  WireWriter outputs;
  outputs.Bytes(spec::kRequestedOutputName, "attn_weights");
  WireWriter request;
  request.Bytes(spec::kRequestModelName, "enc")
      .Bytes(spec::kRequestModelVersion, "1")
      .Bytes(spec::kRequestId, "req-7")
      .Message(spec::kRequestParameters, BoolParameter("is_causal", true))
      .Message(spec::kRequestParameters, BoolParameter("average_attn_weights", false))
      .Message(spec::kRequestInputs, InputHeader("query", "FP32", {1, 2, 4}))
      .Message(spec::kRequestInputs, InputHeader("key_padding_mask", "BOOL", {1, 2}))
      .Message(spec::kRequestOutputs, outputs)
      .Bytes(spec::kRequestRawInputContents, FloatBytes(query))
      .Bytes(spec::kRequestRawInputContents, std::string("\0\1", 2));

  inference::ModelInferRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(request.str()));
  EXPECT_EQ(parsed.model_name(), "enc");
  EXPECT_EQ(parsed.model_version(), "1");
  EXPECT_EQ(parsed.id(), "req-7");
  ASSERT_EQ(parsed.inputs_size(), 2);
  EXPECT_EQ(parsed.inputs(1).name(), "key_padding_mask");
  EXPECT_EQ(parsed.inputs(0).shape().size(), 3);
  ASSERT_EQ(parsed.raw_input_contents_size(), 2);
  EXPECT_TRUE(parsed.parameters().at("is_causal").bool_param());

  auto call = DecodeModelInferRequest(parsed, DecodeOptions{});
  ASSERT_TRUE(call.ok()) << call.status().ToString();
  EXPECT_EQ(call->request.model, "enc");
  EXPECT_EQ(call->request.model_version, "1");
  EXPECT_EQ(call->id, "req-7");
  const HostInputs& in = call->request.inputs;
  EXPECT_TRUE(at::equal(ToTensor(in.query), at::arange(1, 9, at::kFloat).reshape({1, 2, 4})));
  EXPECT_TRUE(at::equal(ToTensor(in.key_padding_mask), BoolTensor({0, 1}, {1, 2})));
  EXPECT_FALSE(in.key.defined());
  EXPECT_TRUE(in.is_causal);
  EXPECT_TRUE(in.need_weights);  // implied by asking for attn_weights
  EXPECT_FALSE(in.average_attn_weights);
  EXPECT_EQ(call->outputs, std::vector<OutputTensor>{OutputTensor::kAttnWeights});
}

TEST(OipWireCompat, TypedContentsPackedAndUnpackedDecodeAlike) {
  WireWriter packed_contents;
  packed_contents.PackedFloat(spec::kFp32Contents, {0.5f, -1.f});
  WireWriter unpacked_contents;  // proto3 parsers must accept both encodings
  unpacked_contents.Fixed32Float(spec::kFp32Contents, 0.5f).Fixed32Float(spec::kFp32Contents, -1.f);
  WireWriter mask_contents;
  mask_contents.PackedInt64(spec::kBoolContents, {1, 0});  // bools are varints
  for (const WireWriter* contents : {&packed_contents, &unpacked_contents}) {
    WireWriter query = InputHeader("query", "FP32", {1, 1, 2});
    query.Message(spec::kInputContents, *contents);
    WireWriter mask = InputHeader("attn_mask", "BOOL", {1, 2});
    mask.Message(spec::kInputContents, mask_contents);
    WireWriter request;
    request.Message(spec::kRequestInputs, query).Message(spec::kRequestInputs, mask);
    inference::ModelInferRequest parsed;
    ASSERT_TRUE(parsed.ParseFromString(request.str()));
    auto call = DecodeModelInferRequest(parsed, DecodeOptions{});
    ASSERT_TRUE(call.ok()) << call.status().ToString();
    EXPECT_TRUE(at::equal(ToTensor(call->request.inputs.query),
                          at::tensor({0.5f, -1.f}).reshape({1, 1, 2})));
    EXPECT_TRUE(at::equal(ToTensor(call->request.inputs.attn_mask), BoolTensor({1, 0}, {1, 2})));
    EXPECT_FALSE(call->request.inputs.need_weights);
    EXPECT_EQ(call->outputs, std::vector<OutputTensor>{OutputTensor::kOutput});
  }
}

TEST(OipWireCompat, ResponseFieldsCarryTheSpecificationNumbers) {
  InferenceResponse result;
  result.model = "enc";
  result.model_version = "1";
  result.outputs.output = ToHost(at::arange(6, at::kFloat).reshape({1, 2, 3}));
  result.outputs.attn_weights = ToHost(at::full({1, 2, 2}, 0.5f));
  result.queue_us = 11;
  inference::ModelInferResponse response;
  ASSERT_TRUE(serve::oip::EncodeModelInferResponse(
                  result, {OutputTensor::kOutput, OutputTensor::kAttnWeights}, "req-7", &response)
                  .ok());
  std::vector<std::string> names, datatypes, raw;
  std::vector<std::vector<int64_t>> shapes;
  int parameters = 0;  // map entries: queue_us, compute_us
  for (const WireField& f : ReadFields(response.SerializeAsString())) {
    if (f.number == spec::kResponseModelName) {
      EXPECT_EQ(f.bytes, "enc");
    } else if (f.number == spec::kResponseModelVersion) {
      EXPECT_EQ(f.bytes, "1");
    } else if (f.number == spec::kResponseId) {
      EXPECT_EQ(f.bytes, "req-7");
    }
    if (f.number == spec::kResponseRawOutputContents) raw.push_back(f.bytes);
    if (f.number == spec::kResponseParameters) ++parameters;
    if (f.number != spec::kResponseOutputs) continue;
    for (const WireField& g : ReadFields(f.bytes)) {
      if (g.number == spec::kOutputName) names.push_back(g.bytes);
      if (g.number == spec::kOutputDatatype) datatypes.push_back(g.bytes);
      if (g.number == spec::kOutputShape) shapes.push_back(PackedInt64s(g.bytes));
    }
  }
  EXPECT_EQ(names, (std::vector<std::string>{"output", "attn_weights"}));
  EXPECT_EQ(datatypes, (std::vector<std::string>{"FP32", "FP32"}));
  EXPECT_EQ(shapes, (std::vector<std::vector<int64_t>>{{1, 2, 3}, {1, 2, 2}}));
  ASSERT_EQ(raw.size(), 2u);
  EXPECT_EQ(raw[0], FloatBytes({0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(raw[1], FloatBytes({0.5f, 0.5f, 0.5f, 0.5f}));
  EXPECT_EQ(parameters, 2);
  EXPECT_EQ(response.parameters().at("queue_us").int64_param(), 11);
}

// The precise messages of the protocol's own checks (shape and model checks are ServerCore's).
TEST(OipWireCompat, MalformedRequestsNameTheField) {
  const auto message = [](const WireWriter& request) {
    inference::ModelInferRequest parsed;
    EXPECT_TRUE(parsed.ParseFromString(request.str()));
    auto call = DecodeModelInferRequest(parsed, DecodeOptions{});
    EXPECT_FALSE(call.ok());
    EXPECT_EQ(call.status().code(), StatusCode::kInvalidArgument);
    return call.ok() ? std::string() : call.status().message();
  };
  const std::string four_floats = FloatBytes({1, 2, 3, 4});
  WireWriter r1;
  r1.Message(spec::kRequestInputs, InputHeader("qurey", "FP32", {1, 1, 4}))
      .Bytes(spec::kRequestRawInputContents, four_floats);
  EXPECT_EQ(message(r1),
            "inputs[0]: unknown input 'qurey' (the model takes query, key, value, "
            "key_padding_mask, attn_mask, head_mask)");
  WireWriter r2;
  r2.Message(spec::kRequestInputs, InputHeader("query", "INT64", {1, 1, 4}))
      .Bytes(spec::kRequestRawInputContents, four_floats);
  EXPECT_EQ(message(r2), "query: datatype 'INT64' is not supported (use FP32, FP16, BF16 or BOOL)");
  WireWriter r3;
  r3.Message(spec::kRequestInputs, InputHeader("query", "FP32", {1, 2, 4}))
      .Bytes(spec::kRequestRawInputContents, four_floats);
  EXPECT_EQ(message(r3), "query: data has 16 bytes, shape [1, 2, 4] float32 needs 32");
  WireWriter r4;
  r4.Message(spec::kRequestInputs, InputHeader("query", "FP32", {1, 1, 4}));
  EXPECT_EQ(message(r4), "query: no data (raw_input_contents is empty and contents unset)");
  WireWriter no_weights;
  no_weights.Message(spec::kRequestInputs, InputHeader("query", "FP32", {1, 1, 4}))
      .Bytes(spec::kRequestRawInputContents, four_floats)
      .Message(spec::kRequestParameters, BoolParameter("need_weights", false))
      .Message(spec::kRequestOutputs,
               WireWriter().Bytes(spec::kRequestedOutputName, "attn_weights"));
  EXPECT_EQ(message(no_weights),
            "outputs: attn_weights requested but parameters.need_weights is false");
}

}  // namespace oip_wire_compat_test
}  // namespace mha::testing
