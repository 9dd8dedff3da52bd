#include "client/credentials.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace mha::client {
namespace {

StatusOr<std::string> ReadPem(const std::string& what, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgument(what + " " + path + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().find("-----BEGIN ") == std::string::npos) {
    return InvalidArgument(what + " " + path + ": not a PEM file");
  }
  return text.str();
}

}  // namespace

StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsClientOptions& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return InvalidArgument(tls.cert_file.empty()
                               ? "TLS key file " + tls.key_file + " needs a certificate file too"
                               : "TLS certificate file " + tls.cert_file + " needs a key file too");
  }
  grpc::SslCredentialsOptions options;
  if (!tls.ca_file.empty()) {
    auto ca = ReadPem("TLS CA file", tls.ca_file);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
  }
  if (!tls.cert_file.empty()) {
    auto cert = ReadPem("TLS certificate file", tls.cert_file);
    if (!cert.ok()) return cert.status();
    auto key = ReadPem("TLS key file", tls.key_file);
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *cert;
    options.pem_private_key = *key;
  }
  return grpc::SslCredentials(options);
}

void AddTlsChannelArgs(const TlsClientOptions& tls, grpc::ChannelArguments* args) {
  if (!tls.server_name.empty()) args->SetSslTargetNameOverride(tls.server_name);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsOrThrow(const TlsClientOptions& tls,
                                                                    grpc::ChannelArguments* args) {
  auto credentials = MakeChannelCredentials(tls);
  if (!credentials.ok()) throw std::invalid_argument(credentials.status().message());
  AddTlsChannelArgs(tls, args);
  return *credentials;
}

}  // namespace mha::client
