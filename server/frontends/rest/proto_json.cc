#include "server/frontends/rest/proto_json.h"

#include <google/protobuf/descriptor.h>

#include <string>

namespace mha::serve::rest {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using nlohmann::json;

json ScalarToJson(const Message& m, const FieldDescriptor* f) {
  const Reflection* r = m.GetReflection();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return r->GetInt32(m, f);
    case FieldDescriptor::CPPTYPE_INT64:
      return r->GetInt64(m, f);
    case FieldDescriptor::CPPTYPE_UINT32:
      return r->GetUInt32(m, f);
    case FieldDescriptor::CPPTYPE_UINT64:
      return r->GetUInt64(m, f);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return r->GetDouble(m, f);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return r->GetFloat(m, f);
    case FieldDescriptor::CPPTYPE_BOOL:
      return r->GetBool(m, f);
    case FieldDescriptor::CPPTYPE_ENUM:
      return r->GetEnum(m, f)->name();
    case FieldDescriptor::CPPTYPE_STRING:
      return r->GetString(m, f);
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return ProtoToJson(r->GetMessage(m, f));
  }
  return nullptr;
}

json RepeatedToJson(const Message& m, const FieldDescriptor* f, int i) {
  const Reflection* r = m.GetReflection();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return r->GetRepeatedInt32(m, f, i);
    case FieldDescriptor::CPPTYPE_INT64:
      return r->GetRepeatedInt64(m, f, i);
    case FieldDescriptor::CPPTYPE_UINT32:
      return r->GetRepeatedUInt32(m, f, i);
    case FieldDescriptor::CPPTYPE_UINT64:
      return r->GetRepeatedUInt64(m, f, i);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return r->GetRepeatedDouble(m, f, i);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return r->GetRepeatedFloat(m, f, i);
    case FieldDescriptor::CPPTYPE_BOOL:
      return r->GetRepeatedBool(m, f, i);
    case FieldDescriptor::CPPTYPE_ENUM:
      return r->GetRepeatedEnum(m, f, i)->name();
    case FieldDescriptor::CPPTYPE_STRING:
      return r->GetRepeatedString(m, f, i);
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return ProtoToJson(r->GetRepeatedMessage(m, f, i));
  }
  return nullptr;
}

// A map field (repeated entries of {key, value}) as a JSON object keyed by the key's text.
json MapToJson(const Message& m, const FieldDescriptor* f) {
  const Reflection* r = m.GetReflection();
  json out = json::object();
  const FieldDescriptor* key = f->message_type()->map_key();
  const FieldDescriptor* value = f->message_type()->map_value();
  for (int i = 0; i < r->FieldSize(m, f); ++i) {
    const Message& entry = r->GetRepeatedMessage(m, f, i);
    const json k = ScalarToJson(entry, key);
    out[k.is_string() ? k.get<std::string>() : k.dump()] = ScalarToJson(entry, value);
  }
  return out;
}

}  // namespace

json ProtoToJson(const Message& message) {
  json out = json::object();
  const auto* descriptor = message.GetDescriptor();
  const Reflection* r = message.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* f = descriptor->field(i);
    if (f->is_map()) {
      out[f->name()] = MapToJson(message, f);
    } else if (f->is_repeated()) {
      json values = json::array();
      for (int j = 0; j < r->FieldSize(message, f); ++j) {
        values.push_back(RepeatedToJson(message, f, j));
      }
      out[f->name()] = std::move(values);
    } else if (f->containing_oneof() != nullptr ||
               f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (r->HasField(message, f)) out[f->name()] = ScalarToJson(message, f);
    } else {
      out[f->name()] = ScalarToJson(message, f);
    }
  }
  return out;
}

std::string DumpJson(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace mha::serve::rest
