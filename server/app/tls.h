// gRPC transport security for mha-server: plaintext unless --tls-cert-file/--tls-key-file are set;
// --tls-client-ca-file additionally requires and verifies client certificates (mTLS). Every file is
// read and checked here, at start-up (readable, PEM, key matches certificate), so that a bad
// secret stops the server with a message naming the file instead of failing each handshake.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "mha/status.h"
#include "server/app/config.h"

namespace mha::serve {

// Insecure credentials when no TLS flag is set; SSL credentials otherwise. INVALID_ARGUMENT for a
// flag combination that makes no sense (a certificate without a key, a key without a certificate,
// a client CA without a server certificate) and for files that cannot be read or do not match.
StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const ServerConfig& c);

// "plaintext", "TLS" or "mTLS (client certificates required)": for the start-up log line.
std::string TransportSecurityName(const ServerConfig& c);

}  // namespace mha::serve
