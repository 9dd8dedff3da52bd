// The wire protocol a request came in on: a label of mha_protocol_requests_total, so that the
// front ends can be told apart (everything else they share).
#pragma once

namespace mha::serve {

enum class Protocol { kNative, kOip, kRest };
inline constexpr int kProtocolCount = 3;

// The label value: "mha.v1" (the native gRPC API), "oip" (the Open Inference Protocol over
// gRPC) or "rest" (the same protocol over HTTP/REST, server/frontends/rest).
inline const char* ProtocolName(Protocol protocol) {
  switch (protocol) {
    case Protocol::kOip:
      return "oip";
    case Protocol::kRest:
      return "rest";
    default:
      return "mha.v1";
  }
}

}  // namespace mha::serve
