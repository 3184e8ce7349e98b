#pragma once
// TLS on both ends of the coordinator's gRPC port, from PEM files. The coordinator serves
// TLS with --tls-cert/--tls-key and, with --tls-client-ca, requires every client to present
// a certificate signed by that CA (mutual TLS), and with --tls-client-name one that carries
// that name. Clients (the sidecar, cohortctl) verify the coordinator against a CA and present
// their own certificate with the same four flags.
//
// Both ends read the files again every `refresh` (gRPC's FileWatcherCertificateProvider):
// a certificate renewed in place (a Kubernetes Secret that cert-manager or the operator
// rewrites) is served and presented from the next handshake on, without a restart.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace CLI {
class App;
}

namespace cohort {

struct TlsFiles {
  std::string cert;             // PEM server certificate chain
  std::string key;              // PEM private key
  std::string client_ca;        // when set, clients must present a certificate signed by it
  std::string client_name;      // when set, the client certificate must carry it (a DNS name
                                // or the common name)
  std::string refresh = "60s";  // how often the files are read again (whole seconds)
};

// The server's credentials: plain text when no file is named. With a token, every call
// without it is refused in gRPC's transport, before its message is read (grpc_auth.h). A
// missing half of a pair, an unreadable file or a flag that needs another is an error naming
// the flag.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const TlsFiles& tls, const std::string& token);

struct ClientTls {
  std::string ca;               // PEM CA the coordinator's certificate must be signed by
  std::string cert;             // PEM client certificate chain (mutual TLS)
  std::string key;              // PEM private key for `cert`
  std::string server_name;      // the name to verify in the coordinator's certificate
                                // (default: the host of the address)
  std::string refresh = "60s";  // how often the files are read again (whole seconds)

  bool enabled() const { return !ca.empty() || !cert.empty() || !key.empty(); }
};

// Adds --tls-ca, --tls-cert, --tls-key, --tls-server-name and --tls-refresh (each after
// `prefix`, such as "coordinator-") to a program's command line.
void AddClientTlsFlags(CLI::App& app, ClientTls* tls, const std::string& prefix = "");

// The credentials of a channel to the coordinator: insecure when TLS is not asked for;
// otherwise TLS verifying the coordinator against `ca` (the system's roots when empty) and,
// with `cert` and `key`, presenting them. Sets the name to verify on `args`. A missing half
// of the pair or an unreadable file is an error naming the flag (after `prefix`).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(
    const ClientTls& tls, grpc::ChannelArguments* args, const std::string& prefix = "");

}  // namespace cohort
