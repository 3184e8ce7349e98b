#include "common/grpc_tls.h"

#include <fstream>
#include <sstream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"

namespace cohort {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const std::string& flag) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read ", flag, " file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " file ", path, " holds no PEM block (\"-----BEGIN ...\")"));
  }
  return ss.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const TlsFiles& tls) {
  if (tls.cert.empty() && tls.key.empty()) {
    if (!tls.client_ca.empty()) {
      return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
    }
    return grpc::InsecureServerCredentials();
  }
  if (tls.cert.empty() || tls.key.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
  }
  auto cert = ReadPem(tls.cert, "--tls-cert");
  if (!cert.ok()) return cert.status();
  auto key = ReadPem(tls.key, "--tls-key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({*key, *cert});
  if (!tls.client_ca.empty()) {
    auto ca = ReadPem(tls.client_ca, "--tls-client-ca");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

void AddClientTlsFlags(CLI::App& app, ClientTls* tls, const std::string& prefix) {
  app.add_option("--" + prefix + "tls-ca", tls->ca,
                 "PEM CA the coordinator's certificate must be signed by; enables TLS");
  app.add_option("--" + prefix + "tls-cert", tls->cert,
                 "PEM client certificate for a coordinator that requires one (mutual TLS); "
                 "enables TLS");
  app.add_option("--" + prefix + "tls-key", tls->key,
                 "PEM private key for --" + prefix + "tls-cert");
  app.add_option("--" + prefix + "tls-server-name", tls->server_name,
                 "the name the coordinator's certificate must carry (default: the address's "
                 "host)");
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(
    const ClientTls& tls, grpc::ChannelArguments* args, const std::string& prefix) {
  const std::string flag = "--" + prefix + "tls-";
  if (!tls.enabled()) {
    if (!tls.server_name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, "server-name needs TLS: name ", flag, "ca or ", flag, "cert"));
    }
    return grpc::InsecureChannelCredentials();
  }
  if (tls.cert.empty() != tls.key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a client certificate needs both ", flag, "cert and ", flag, "key"));
  }
  grpc::SslCredentialsOptions options;
  if (!tls.ca.empty()) {
    auto ca = ReadPem(tls.ca, flag + "ca");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
  }
  if (!tls.cert.empty()) {
    auto cert = ReadPem(tls.cert, flag + "cert");
    if (!cert.ok()) return cert.status();
    auto key = ReadPem(tls.key, flag + "key");
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *cert;
    options.pem_private_key = *key;
  }
  if (!tls.server_name.empty()) args->SetSslTargetNameOverride(tls.server_name);
  return grpc::SslCredentials(options);
}

}  // namespace cohort
