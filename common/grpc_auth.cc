#include "common/grpc_auth.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/client_interceptor.h"

namespace cohort {
namespace {

constexpr char kHowTo[] =
    "send gRPC metadata \"authorization: Bearer <token>\" with the job's token "
    "(cohortctl and cohort-sidecar: --auth-token-file; in a pod, the workload's sidecar "
    "attaches it)";

// Equal without telling how much of it matched by how long it took.
bool SameToken(absl::string_view given, absl::string_view want) {
  if (want.empty()) return false;
  unsigned char diff = given.size() == want.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i] ^ want[i % want.size()]);
  }
  return diff == 0;
}

// Adds the authorization metadata to every call of a channel.
class BearerInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerInterceptor(const std::string* value) : value_(value) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(kAuthorizationHeader, *value_);
    }
    methods->Proceed();
  }

 private:
  const std::string* const value_;  // the factory's, which the channel keeps
};

class BearerInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerInterceptorFactory(const std::string& token) : value_("Bearer " + token) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerInterceptor(&value_);
  }

 private:
  const std::string value_;
};

}  // namespace

std::shared_ptr<grpc::Channel> CreateChannelWithToken(
    const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const grpc::ChannelArguments& args, const std::string& token) {
  if (token.empty()) return grpc::CreateCustomChannel(address, credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<BearerInterceptorFactory>(token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials, args,
                                                                 std::move(factories));
}

absl::Status CallAuth::Check(const grpc::ServerContextBase& ctx) const {
  const auto& metadata = ctx.client_metadata();
  auto range = metadata.equal_range(kAuthorizationHeader);
  if (range.first == range.second) {
    return absl::UnauthenticatedError(
        absl::StrCat("this coordinator requires the job's token and the call has none: ", kHowTo));
  }
  for (auto it = range.first; it != range.second; ++it) {
    absl::string_view value(it->second.data(), it->second.size());
    if (!absl::StartsWithIgnoreCase(value, "Bearer ")) continue;
    if (SameToken(absl::StripAsciiWhitespace(value.substr(7)), token_)) return absl::OkStatus();
    return absl::UnauthenticatedError(
        "the call's token is not this coordinator's: use the token of the job it serves");
  }
  return absl::UnauthenticatedError(
      absl::StrCat("the call's authorization metadata is not \"Bearer <token>\": ", kHowTo));
}

absl::StatusOr<std::string> ReadAuthTokenFile(const std::string& path, const char* flag) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(flag, ": cannot read the token file ", path));
  }
  std::stringstream content;
  content << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(content.str()));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": the token file ", path, " is empty"));
  }
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": the token in ", path,
          " holds a space, a line break or a non-ASCII character; a token is one word of "
          "printable ASCII"));
    }
  }
  return token;
}

}  // namespace cohort
