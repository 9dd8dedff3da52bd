// The wire protocol a request came in on: a label of mha_protocol_requests_total, so that the two
// front ends on one port can be told apart (everything else they share).
#pragma once

namespace mha::serve {

enum class Protocol { kNative, kOip };
inline constexpr int kProtocolCount = 2;

// The label value: "mha.v1" (the native gRPC API) or "oip" (the Open Inference Protocol).
inline const char* ProtocolName(Protocol protocol) {
  return protocol == Protocol::kOip ? "oip" : "mha.v1";
}

}  // namespace mha::serve
