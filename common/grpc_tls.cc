#include "common/grpc_tls.h"

#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/grpc_auth.h"
#include "grpc/grpc_security.h"
#include "grpc/support/string_util.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_certificate_verifier.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace cohort {
namespace {

using grpc::experimental::FileWatcherCertificateProvider;

// Read once at the start, so that a wrong path or a file that is not PEM is a clear error
// now rather than a failed handshake later; gRPC's provider reads the files itself.
absl::Status CheckPem(const std::string& path, const std::string& flag) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read ", flag, " file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " file ", path, " holds no PEM block (\"-----BEGIN ...\")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<unsigned int> RefreshSeconds(const std::string& text, const std::string& flag) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d < absl::Seconds(1) ||
      d > absl::Seconds(std::numeric_limits<int>::max()) || d != absl::Trunc(d, absl::Seconds(1))) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " \"", text, "\" is not a whole number of seconds, at least 1s"));
  }
  return static_cast<unsigned int>(absl::ToInt64Seconds(d));
}

// Completes a handshake only with a client whose certificate (already verified against the
// client CA by the TLS stack) carries the job's name: with a CA shared by many jobs (a
// cert-manager issuer), another job's client certificate is signed by the same CA.
//
// Through gRPC's C verifier API: the C++ wrapper (ExternalCertificateVerifier::Create) hands
// its object to the core through a pointer that clang's analyzer reports as a leak. The
// core calls Destruct when it lets go of the verifier.
struct ClientNameVerifier {
  explicit ClientNameVerifier(std::string n) : name(std::move(n)) {
    external.user_data = this;
    external.verify = Verify;
    external.cancel = [](void*, grpc_tls_custom_verification_check_request*) {};
    external.destruct = [](void* self) { delete static_cast<ClientNameVerifier*>(self); };
  }

  static int Verify(void* self, grpc_tls_custom_verification_check_request* request,
                    grpc_tls_on_custom_verification_check_done_cb /*callback*/,
                    void* /*callback_arg*/, grpc_status_code* sync_status,
                    char** sync_error_details) {
    const std::string& name = static_cast<ClientNameVerifier*>(self)->name;
    const auto& peer = request->peer_info;
    bool named = peer.common_name != nullptr && name == peer.common_name;
    for (size_t i = 0; i < peer.san_names.dns_names_size; ++i) {
      named = named || name == peer.san_names.dns_names[i];
    }
    for (size_t i = 0; i < peer.san_names.uri_names_size; ++i) {
      named = named || name == peer.san_names.uri_names[i];
    }
    if (named) {
      *sync_status = GRPC_STATUS_OK;
    } else {
      *sync_status = GRPC_STATUS_UNAUTHENTICATED;
      *sync_error_details =
          gpr_strdup(absl::StrCat("the client certificate does not carry the name ", name,
                                  " (--tls-client-name)")
                         .c_str());
    }
    return 1;  // decided now
  }

  const std::string name;
  grpc_tls_certificate_verifier_external external{};
};

std::shared_ptr<grpc::experimental::CertificateVerifier> ClientNameCheck(const std::string& name) {
  auto* verifier = new ClientNameVerifier(name);
  return std::make_shared<grpc::experimental::CertificateVerifier>(
      grpc_tls_certificate_verifier_external_create(&verifier->external));
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const TlsFiles& tls, const std::string& token) {
  if (tls.cert.empty() && tls.key.empty()) {
    if (!tls.client_ca.empty()) {
      return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
    }
    if (!tls.client_name.empty()) {
      return absl::InvalidArgumentError(
          "--tls-client-name needs --tls-cert, --tls-key and "
          "--tls-client-ca");
    }
    return PlainServerCredentials(token);
  }
  if (tls.cert.empty() || tls.key.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
  }
  if (!tls.client_name.empty() && tls.client_ca.empty()) {
    return absl::InvalidArgumentError("--tls-client-name needs --tls-client-ca");
  }
  if (auto s = CheckPem(tls.cert, "--tls-cert"); !s.ok()) return s;
  if (auto s = CheckPem(tls.key, "--tls-key"); !s.ok()) return s;
  if (!tls.client_ca.empty()) {
    if (auto s = CheckPem(tls.client_ca, "--tls-client-ca"); !s.ok()) return s;
  }
  auto refresh = RefreshSeconds(tls.refresh, "--tls-refresh");
  if (!refresh.ok()) return refresh.status();
  auto provider =
      std::make_shared<FileWatcherCertificateProvider>(tls.key, tls.cert, tls.client_ca, *refresh);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (!tls.client_ca.empty()) {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  if (!tls.client_name.empty()) {
    options.set_certificate_verifier(ClientNameCheck(tls.client_name));
  }
  std::shared_ptr<grpc::ServerCredentials> credentials =
      grpc::experimental::TlsServerCredentials(options);
  RequireToken(credentials.get(), token);
  return credentials;
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
  app.add_option("--" + prefix + "tls-refresh", tls->refresh,
                 "how often the three files are read again, so that a renewed certificate "
                 "is used from the next connection on")
      ->capture_default_str();
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
  if (!tls.ca.empty()) {
    if (auto s = CheckPem(tls.ca, flag + "ca"); !s.ok()) return s;
  }
  if (!tls.cert.empty()) {
    if (auto s = CheckPem(tls.cert, flag + "cert"); !s.ok()) return s;
    if (auto s = CheckPem(tls.key, flag + "key"); !s.ok()) return s;
  }
  auto refresh = RefreshSeconds(tls.refresh, flag + "refresh");
  if (!refresh.ok()) return refresh.status();
  grpc::experimental::TlsChannelCredentialsOptions options;
  // Without a CA of its own the client trusts the system's roots (gRPC's default when no
  // root certificate is watched).
  options.set_certificate_provider(
      std::make_shared<FileWatcherCertificateProvider>(tls.key, tls.cert, tls.ca, *refresh));
  if (!tls.ca.empty()) options.watch_root_certs();
  if (!tls.cert.empty()) options.watch_identity_key_cert_pairs();
  options.set_verify_server_certs(true);
  options.set_certificate_verifier(
      std::make_shared<grpc::experimental::HostNameCertificateVerifier>());
  if (!tls.server_name.empty()) args->SetSslTargetNameOverride(tls.server_name);
  return grpc::experimental::TlsCredentials(options);
}

}  // namespace cohort
