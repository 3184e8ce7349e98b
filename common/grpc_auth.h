#pragma once
// A job's token (`--auth-token-file`) on both ends of a gRPC call. Every call of every
// protocol carries metadata `authorization: Bearer <token>`: clients attach it to each call
// of a channel with an interceptor, and the coordinator (CallAuth) refuses a call without it,
// or with another token, UNAUTHENTICATED before anything else is looked at. gRPC's own
// AuthMetadataProcessor and call credentials cannot do this: they work on TLS channels only,
// and the token must work on plain ones too (inside a pod network, behind a NetworkPolicy).

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

// Reads a token file: its content with surrounding whitespace removed. An unreadable file,
// an empty token, or one with characters a header value cannot carry is refused, naming
// `flag` and the path.
absl::StatusOr<std::string> ReadAuthTokenFile(const std::string& path, const char* flag);

// A channel to `address` whose every call carries `token` (empty: a plain channel).
std::shared_ptr<grpc::Channel> CreateChannelWithToken(
    const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const grpc::ChannelArguments& args, const std::string& token);

}  // namespace cohort
