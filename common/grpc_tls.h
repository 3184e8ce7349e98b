#pragma once
// TLS on both ends of the coordinator's gRPC port, from PEM files. The coordinator serves
// TLS with --tls-cert/--tls-key and, with --tls-client-ca, requires every client to present
// a certificate signed by that CA (mutual TLS). Clients (the sidecar, cohortctl) verify the
// coordinator against a CA and present their own certificate with the same four flags.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace CLI {
class App;
}

namespace cohort {

struct TlsFiles {
  std::string cert;       // PEM server certificate chain
  std::string key;        // PEM private key
  std::string client_ca;  // when set, clients must present a certificate signed by it
};

// The server's credentials: insecure when no file is named. A missing half of a pair or an
// unreadable file is an error naming the flag.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const TlsFiles& tls);

struct ClientTls {
  std::string ca;           // PEM CA the coordinator's certificate must be signed by
  std::string cert;         // PEM client certificate chain (mutual TLS)
  std::string key;          // PEM private key for `cert`
  std::string server_name;  // the name to verify in the coordinator's certificate
                            // (default: the host of the address)

  bool enabled() const { return !ca.empty() || !cert.empty() || !key.empty(); }
};

// Adds --tls-ca, --tls-cert, --tls-key and --tls-server-name (each after `prefix`, such as
// "coordinator-") to a program's command line.
void AddClientTlsFlags(CLI::App& app, ClientTls* tls, const std::string& prefix = "");

// The credentials of a channel to the coordinator: insecure when TLS is not asked for;
// otherwise TLS verifying the coordinator against `ca` (the system's roots when empty) and,
// with `cert` and `key`, presenting them. Sets the name to verify on `args`. A missing half
// of the pair or an unreadable file is an error naming the flag (after `prefix`).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(
    const ClientTls& tls, grpc::ChannelArguments* args, const std::string& prefix = "");

}  // namespace cohort
