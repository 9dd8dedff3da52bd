#include "server/app/tls.h"

#include <grpcpp/security/server_credentials.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace mha::serve {
namespace {

// The whole file, or an error naming the flag and the file.
StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgument(flag + " " + path + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return InvalidArgument(flag + " " + path + ": cannot be read");
  if (text.str().find("-----BEGIN ") == std::string::npos) {
    return InvalidArgument(flag + " " + path + ": not a PEM file");
  }
  return text.str();
}

std::string OpenSslError() {
  const unsigned long code = ERR_get_error();  // NOLINT(google-runtime-int): OpenSSL's type
  ERR_clear_error();
  if (code == 0) return "no detail";
  char buf[256];
  ERR_error_string_n(code, buf, sizeof(buf));
  return buf;
}

// BIO over PEM text already read (the file is read once, so what is checked is what gRPC gets).
struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioDeleter>;

BioPtr MemoryBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// The certificate parses, the key parses (unencrypted: there is nobody to type a pass phrase) and
// the key is the certificate's.
Status CheckKeyPair(const ServerConfig& c, const std::string& cert_pem,
                    const std::string& key_pem) {
  ERR_clear_error();
  BioPtr cert_bio = MemoryBio(cert_pem);
  std::unique_ptr<X509, X509Deleter> cert(
      PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  if (!cert) {
    return InvalidArgument("--tls-cert-file " + c.tls_cert_file + ": no PEM certificate in it (" +
                           OpenSslError() + ")");
  }
  BioPtr key_bio = MemoryBio(key_pem);
  // An empty pass phrase: an encrypted key fails here instead of prompting on the terminal.
  std::unique_ptr<EVP_PKEY, KeyDeleter> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, const_cast<char*>("")));
  if (!key) {
    return InvalidArgument("--tls-key-file " + c.tls_key_file +
                           ": no unencrypted PEM private key in it (" + OpenSslError() + ")");
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgument("--tls-key-file " + c.tls_key_file +
                           " does not match the certificate in --tls-cert-file " + c.tls_cert_file);
  }
  return Status::Ok();
}

Status CheckCaFile(const ServerConfig& c, const std::string& ca_pem) {
  ERR_clear_error();
  BioPtr bio = MemoryBio(ca_pem);
  std::unique_ptr<X509, X509Deleter> ca(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!ca) {
    return InvalidArgument("--tls-client-ca-file " + c.tls_client_ca_file +
                           ": no PEM certificate in it (" + OpenSslError() + ")");
  }
  return Status::Ok();
}

}  // namespace

std::string TransportSecurityName(const ServerConfig& c) {
  if (c.tls_cert_file.empty()) return "plaintext";
  return c.tls_client_ca_file.empty() ? "TLS" : "mTLS (client certificates required)";
}

StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const ServerConfig& c) {
  const bool cert = !c.tls_cert_file.empty(), key = !c.tls_key_file.empty();
  if (!cert && !key) {
    if (!c.tls_client_ca_file.empty()) {
      return InvalidArgument("--tls-client-ca-file " + c.tls_client_ca_file +
                             " needs server TLS: set --tls-cert-file and --tls-key-file too");
    }
    return grpc::InsecureServerCredentials();
  }
  if (!key) {
    return InvalidArgument("--tls-cert-file " + c.tls_cert_file +
                           " is set but --tls-key-file is not: TLS needs both");
  }
  if (!cert) {
    return InvalidArgument("--tls-key-file " + c.tls_key_file +
                           " is set but --tls-cert-file is not: TLS needs both");
  }
  auto cert_pem = ReadPem("--tls-cert-file", c.tls_cert_file);
  if (!cert_pem.ok()) return cert_pem.status();
  auto key_pem = ReadPem("--tls-key-file", c.tls_key_file);
  if (!key_pem.ok()) return key_pem.status();
  MHA_RETURN_IF_ERROR(CheckKeyPair(c, *cert_pem, *key_pem));

  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({*key_pem, *cert_pem});
  if (!c.tls_client_ca_file.empty()) {
    auto ca_pem = ReadPem("--tls-client-ca-file", c.tls_client_ca_file);
    if (!ca_pem.ok()) return ca_pem.status();
    MHA_RETURN_IF_ERROR(CheckCaFile(c, *ca_pem));
    options.pem_root_certs = *ca_pem;
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

}  // namespace mha::serve
