// MakeClientChannel: the gRPC channel of mha_client and mha-client, for one server or several.
//
// Targets (gRPC name syntax):
//   host:port                      one server (pick_first)
//   ipv4:10.0.0.1:8500,10.0.0.2:8500   several addresses (round_robin by default)
//   dns:///mha-serve-headless:8500 every address the name resolves to (round_robin by default),
//                                  e.g. a Kubernetes headless Service (deploy/k8s)
// With round_robin, client-side health checking (grpc.health.v1.Health/Watch, service "") takes a
// replica out of the rotation while it reports NOT_SERVING (loading, or draining on SIGTERM), and
// calls to mha.v1.AttentionService that fail with UNAVAILABLE, or CANCELLED by a stopping server,
// are retried (Forward is a pure function of its request, so a retry is safe): up to 5 attempts,
// backoff 50 ms doubling to 1 s.
// The service config is ClientServiceConfig()'s; see docs/deploy.md "Containers".
#pragma once

#include <grpcpp/channel.h>

#include <memory>
#include <string>

#include "credentials.h"

namespace mha::client {

struct ChannelOptions {
  // "round_robin", "pick_first", or "" = round_robin when the target names several addresses
  // (ipv4:/ipv6: with commas) or a DNS name (dns:), else pick_first.
  std::string lb;
  bool health_check = true;            // client-side health checking (round_robin only)
  bool retry = true;                   // retry UNAVAILABLE and CANCELLED (see above)
  int max_receive_message_bytes = -1;  // -1 = unlimited (per-head weights get big)
  int max_send_message_bytes = -1;     // -1 = unlimited (the server decides)
};

// True for "ipv4:a,b" / "ipv6:a,b" lists and for "dns:" targets.
bool TargetMayHaveSeveralAddresses(const std::string& target);

// The policy ChannelOptions::lb resolves to for `target`.
std::string ResolveLoadBalancing(const std::string& target, const std::string& lb);

// The JSON service config MakeClientChannel installs as the channel's default.
std::string ClientServiceConfig(const std::string& policy, const ChannelOptions& options);

// A channel to `target` with that service config and the message size limits; plaintext unless
// `tls` is set (credentials.h). An unknown lb policy or an unreadable TLS file throws
// std::invalid_argument (never falls back to plaintext).
std::shared_ptr<grpc::Channel> MakeClientChannel(const std::string& target,
                                                 const ChannelOptions& options,
                                                 const TlsClientOptions& tls = {});

}  // namespace mha::client
