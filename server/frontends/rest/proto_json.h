// Protobuf messages of the Open Inference Protocol (ModelMetadataResponse, ModelConfig,
// ModelStatisticsResponse, RepositoryIndexResponse) as the JSON the KServe v2 / Triton REST API
// answers: field names as in the .proto, 64-bit integers as JSON numbers (protobuf's own JSON
// mapping writes them as strings; Triton's REST API, and its clients, use numbers), enums by
// name, maps as objects, scalar and repeated fields always present (defaults included), message
// fields when set. One converter, so the REST answers have exactly the gRPC front end's content.
#pragma once

#include <google/protobuf/message.h>

#include <nlohmann/json.hpp>
#include <string>

namespace mha::serve::rest {

nlohmann::json ProtoToJson(const google::protobuf::Message& message);

// `j` as compact JSON text; invalid UTF-8 in its strings becomes U+FFFD rather than an exception.
std::string DumpJson(const nlohmann::json& j);

}  // namespace mha::serve::rest
