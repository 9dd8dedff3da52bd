// Transport security for mha_client channels: plaintext unless a TLS option is set. With a CA file
// the server's certificate is verified against it (else against the system roots, as gRPC does);
// a client certificate + key answer a server that requires them (mTLS); server_name overrides the
// name the server's certificate is checked for (when the target is an IP or a load balancer).
#pragma once

#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <memory>
#include <string>

#include "mha/status.h"

namespace mha::client {

struct TlsClientOptions {
  std::string ca_file;      // PEM roots to verify the server with; "" = system roots
  std::string cert_file;    // PEM client certificate chain (mTLS); with key_file
  std::string key_file;     // PEM private key of cert_file
  std::string server_name;  // expected name in the server certificate; "" = the target's host

  // Any option set means TLS (a server name alone = TLS with the system roots).
  bool enabled() const {
    return !ca_file.empty() || !cert_file.empty() || !key_file.empty() || !server_name.empty();
  }
};

// InsecureChannelCredentials when !tls.enabled(); SslCredentials otherwise. INVALID_ARGUMENT naming
// the file when one cannot be read, or when only one of cert_file/key_file is set.
StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsClientOptions& tls);

// Sets GRPC_SSL_TARGET_NAME_OVERRIDE_ARG when tls.server_name is set (does nothing otherwise).
void AddTlsChannelArgs(const TlsClientOptions& tls, grpc::ChannelArguments* args);

// For constructors that cannot return a status: MakeChannelCredentials + AddTlsChannelArgs,
// throwing std::invalid_argument with the message on failure (never falls back to plaintext).
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsOrThrow(const TlsClientOptions& tls,
                                                                    grpc::ChannelArguments* args);

}  // namespace mha::client
