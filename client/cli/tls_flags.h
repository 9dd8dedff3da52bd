// mha-client's TLS flags (client/credentials.h), each also from the environment (MHA_TLS_...).
#pragma once

#include <CLI/CLI.hpp>

#include "client/credentials.h"

namespace mha::client::cli {

inline void AddTlsFlags(CLI::App& app, TlsClientOptions* tls) {
  const char* group = "TLS (any of these = TLS; none = plaintext)";
  app.add_option("--tls-ca-file", tls->ca_file,
                 "PEM CA certificates to verify the server with (default: system roots)")
      ->envname("MHA_TLS_CA_FILE")
      ->group(group);
  app.add_option("--tls-cert-file", tls->cert_file,
                 "PEM client certificate for mTLS (with --tls-key-file)")
      ->envname("MHA_TLS_CERT_FILE")
      ->group(group);
  app.add_option("--tls-key-file", tls->key_file, "PEM private key of --tls-cert-file")
      ->envname("MHA_TLS_KEY_FILE")
      ->group(group);
  app.add_option("--tls-server-name", tls->server_name,
                 "Name to verify the server certificate for, when the target's host differs "
                 "(an IP address, a load balancer)")
      ->envname("MHA_TLS_SERVER_NAME")
      ->group(group);
}

}  // namespace mha::client::cli
