#pragma once
// A job's token (`--auth-token-file`) on both ends of a gRPC call. Every call of every
// protocol carries metadata `authorization: Bearer <token>`: clients attach it to each call
// of a channel with an interceptor. A server refuses a call without it, or with another
// token, UNAUTHENTICATED twice over:
//   - in gRPC's transport (ServerCredentialsWithToken): gRPC's server auth filter runs our
//     check on the call's metadata, before the server asks for the call's message, so an
//     anonymous caller makes the server read at most one HTTP/2 flow-control window of it
//     and run no handler, whatever size the message claims;
//   - again in each handler (CallAuth), which a server without those credentials still has.

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace cohort {

inline constexpr char kAuthorizationHeader[] = "authorization";

class CallAuth {
 public:
  // `token`: what a call must present after "Bearer ".
  explicit CallAuth(std::string token) : token_(std::move(token)) {}

  // OK, or UNAUTHENTICATED saying what is missing or wrong (never the token itself).
  absl::Status Check(const grpc::ServerContextBase& ctx) const;

 private:
  const std::string token_;
};

// Plain-text server credentials (no TLS): with a token, every call without it is refused in
// gRPC's transport, before its message is read; empty: grpc::InsecureServerCredentials().
std::shared_ptr<grpc::ServerCredentials> PlainServerCredentials(const std::string& token);

// Makes TLS server credentials refuse every call without `token` the same way (nothing when
// `token` is empty). `credentials` must be secure ones (grpc::experimental::TlsServerCredentials).
void RequireToken(grpc::ServerCredentials* credentials, const std::string& token);

// Whether a server listening at `address` (HOST:PORT, [V6]:PORT, or unix:PATH) can only be
// reached from this machine: a Unix socket, localhost, 127.0.0.0/8, ::1 or ::ffff:127.x. A
// server that would listen beyond loopback without a token refuses to start unless its
// --insecure-no-auth says so.
bool IsLoopbackListenAddress(const std::string& address);

// Reads a token file: its content with surrounding whitespace removed. An unreadable file,
// an empty token, or one with characters a header value cannot carry is refused, naming
// `flag` and the path.
absl::StatusOr<std::string> ReadAuthTokenFile(const std::string& path, const char* flag);

// A channel to `address` whose every call carries `token` (empty: a plain channel).
std::shared_ptr<grpc::Channel> CreateChannelWithToken(
    const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const grpc::ChannelArguments& args, const std::string& token);

}  // namespace cohort
