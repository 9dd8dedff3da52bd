#include "channel.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <stdexcept>

namespace mha::client {

bool TargetMayHaveSeveralAddresses(const std::string& target) {
  if (target.rfind("dns:", 0) == 0) return true;
  if (target.rfind("ipv4:", 0) == 0 || target.rfind("ipv6:", 0) == 0) {
    return target.find(',') != std::string::npos;
  }
  return false;
}

std::string ResolveLoadBalancing(const std::string& target, const std::string& lb) {
  if (lb.empty()) return TargetMayHaveSeveralAddresses(target) ? "round_robin" : "pick_first";
  if (lb != "round_robin" && lb != "pick_first") {
    throw std::invalid_argument("load balancing policy must be round_robin or pick_first, not '" +
                                lb + "'");
  }
  return lb;
}

std::string ClientServiceConfig(const std::string& policy, const ChannelOptions& options) {
  std::string config = R"({"loadBalancingConfig":[{")" + policy + R"(":{}}])";
  // Health checking is a round_robin feature in gRPC (pick_first ignores it).
  if (options.health_check && policy == "round_robin") {
    config += R"(,"healthCheckConfig":{"serviceName":""})";
  }
  // CANCELLED as well: a stopping server resets calls it has not handed to a handler yet with
  // CANCELLED (seen in the container tier's failover); the client's own cancellation is never
  // retried by gRPC, so only a server's CANCELLED is.
  if (options.retry) {
    config += R"(,"methodConfig":[{"name":[{"service":"mha.v1.AttentionService"}],)"
              R"("retryPolicy":{"maxAttempts":5,"initialBackoff":"0.05s","maxBackoff":"1s",)"
              R"("backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE","CANCELLED"]}}])";
  }
  return config + "}";
}

std::shared_ptr<grpc::Channel> MakeClientChannel(const std::string& target,
                                                 const ChannelOptions& options,
                                                 const TlsClientOptions& tls) {
  const std::string policy = ResolveLoadBalancing(target, options.lb);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  args.SetMaxSendMessageSize(options.max_send_message_bytes);
  args.SetServiceConfigJSON(ClientServiceConfig(policy, options));
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, options.retry ? 1 : 0);
  auto credentials = ChannelCredentialsOrThrow(tls, &args);
  return grpc::CreateCustomChannel(target, credentials, args);
}

}  // namespace mha::client
