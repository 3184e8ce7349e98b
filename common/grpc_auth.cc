#include "common/grpc_auth.h"

#include <arpa/inet.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpc/grpc.h"
#include "grpc/grpc_security.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/auth_metadata_processor.h"
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

// The check itself, on the values of a call's "authorization" metadata.
absl::Status CheckAuthorization(const std::vector<absl::string_view>& values,
                                absl::string_view token) {
  if (values.empty()) {
    return absl::UnauthenticatedError(
        absl::StrCat("this server requires the job's token and the call has none: ", kHowTo));
  }
  for (absl::string_view value : values) {
    if (!absl::StartsWithIgnoreCase(value, "Bearer ")) continue;
    if (SameToken(absl::StripAsciiWhitespace(value.substr(7)), token)) return absl::OkStatus();
    return absl::UnauthenticatedError(
        "the call's token is not this server's: use the token of the job it serves");
  }
  return absl::UnauthenticatedError(
      absl::StrCat("the call's authorization metadata is not \"Bearer <token>\": ", kHowTo));
}

// The values of the "authorization" entries of metadata as gRPC's C++ API gives it.
std::vector<absl::string_view> AuthorizationValues(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) {
  std::vector<absl::string_view> values;
  auto range = metadata.equal_range(kAuthorizationHeader);
  for (auto it = range.first; it != range.second; ++it) {
    values.emplace_back(it->second.data(), it->second.size());
  }
  return values;
}

// gRPC's server auth filter calls this with a call's metadata, before the server asks the
// transport for the call's message; a status other than OK ends the call with it. `state`: the
// token. Runs on gRPC's thread, and quickly (a compare), so it answers at once.
void ProcessTokenMetadata(void* state, grpc_auth_context* /*context*/, const grpc_metadata* md,
                          size_t num_md, grpc_process_auth_metadata_done_cb done, void* user_data) {
  const auto* token = static_cast<const std::string*>(state);
  std::vector<absl::string_view> values;
  for (size_t i = 0; i < num_md; ++i) {
    absl::string_view key(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(md[i].key)),
                          GRPC_SLICE_LENGTH(md[i].key));
    if (key != kAuthorizationHeader) continue;
    values.emplace_back(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(md[i].value)),
                        GRPC_SLICE_LENGTH(md[i].value));
  }
  absl::Status status = CheckAuthorization(values, *token);
  if (status.ok()) {
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
    return;
  }
  const std::string details(status.message());  // gRPC copies it
  done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_UNAUTHENTICATED, details.c_str());
}

void DestroyToken(void* state) { delete static_cast<std::string*>(state); }

// Plain-text credentials whose connections run ProcessTokenMetadata on every call. gRPC's
// C++ InsecureServerCredentials() takes no AuthMetadataProcessor, but its core credentials
// do, and the server auth filter runs for any server credentials.
class PlainTokenCredentials final : public grpc::ServerCredentials {
 public:
  explicit PlainTokenCredentials(const std::string& token)
      : credentials_(grpc_insecure_server_credentials_create()) {
    grpc_server_credentials_set_auth_metadata_processor(
        credentials_,
        grpc_auth_metadata_processor{&ProcessTokenMetadata, &DestroyToken, new std::string(token)});
  }
  ~PlainTokenCredentials() override { grpc_server_credentials_release(credentials_); }
  PlainTokenCredentials(const PlainTokenCredentials&) = delete;
  PlainTokenCredentials& operator=(const PlainTokenCredentials&) = delete;

  void SetAuthMetadataProcessor(
      const std::shared_ptr<grpc::AuthMetadataProcessor>& /*processor*/) override {
    // Replacing it would drop the token check: a programming error, never a runtime choice.
    std::fputs("cohort: PlainServerCredentials' token check cannot be replaced\n", stderr);
    std::abort();
  }

 private:
  int AddPortToServer(const std::string& address, grpc_server* server) override {
    return grpc_server_add_http2_port(server, address.c_str(), credentials_);
  }

  grpc_server_credentials* const credentials_;
};

// The same check for TLS credentials, through gRPC's C++ processor interface.
class TokenProcessor final : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenProcessor(std::string token) : token_(std::move(token)) {}
  bool IsBlocking() const override { return false; }  // a compare: answered on gRPC's thread
  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext* /*context*/,
                       OutputMetadata* /*consumed*/, OutputMetadata* /*response*/) override {
    absl::Status status = CheckAuthorization(AuthorizationValues(metadata), token_);
    if (status.ok()) return grpc::Status::OK;
    return {grpc::StatusCode::UNAUTHENTICATED, std::string(status.message())};
  }

 private:
  const std::string token_;
};

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
  return CheckAuthorization(AuthorizationValues(ctx.client_metadata()), token_);
}

std::shared_ptr<grpc::ServerCredentials> PlainServerCredentials(const std::string& token) {
  if (token.empty()) return grpc::InsecureServerCredentials();
  return std::make_shared<PlainTokenCredentials>(token);
}

void RequireToken(grpc::ServerCredentials* credentials, const std::string& token) {
  if (token.empty()) return;
  credentials->SetAuthMetadataProcessor(std::make_shared<TokenProcessor>(token));
}

bool IsLoopbackListenAddress(const std::string& address) {
  if (absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:")) {
    return true;
  }
  std::string host;
  if (absl::StartsWith(address, "[")) {
    size_t end = address.find(']');
    if (end == std::string::npos) return false;
    host = address.substr(1, end - 1);
  } else {
    size_t colon = address.rfind(':');
    host = colon == std::string::npos ? address : address.substr(0, colon);
  }
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_V4MAPPED(&v6)) return v6.s6_addr[12] == 127;
    return IN6_IS_ADDR_LOOPBACK(&v6);
  }
  return false;
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
