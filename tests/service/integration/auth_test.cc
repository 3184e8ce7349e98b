// A coordinator run with a job's token (--auth-token-file) over real gRPC: every method of
// every protocol refuses a call without the token, or with another, UNAUTHENTICATED and
// changes nothing; calls with it work, through the agent library and the sidecar's proxy;
// the HTTP endpoints stay open; token files are read strictly.
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "agent/coordination_agent.h"
#include "cohort/v1/coordinator.grpc.pb.h"
#include "common/grpc_auth.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "service/proxy/proxy_server.h"
#include "tensorflow/coordination_service.grpc.pb.h"
#include "tests/service/integration/test_server.h"
#include "tests/support/eventually.h"
#include "tests/support/subprocess.h"
#include "xla/coordination_service.grpc.pb.h"
#include "xla/distributed_runtime.grpc.pb.h"

namespace cohort::testing {
namespace {

namespace tf = tensorflow;

constexpr char kToken[] = "job-token-0123456789abcdef";

std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address, const std::string& token) {
  return CreateChannelWithToken(address, grpc::InsecureChannelCredentials(),
                                grpc::ChannelArguments(), token);
}

std::unique_ptr<grpc::ClientContext> Deadline() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  return ctx;
}

// A unary call of `path` whose request is the bytes of `request`, as they are: its status.
grpc::Status CallRaw(grpc::GenericStub& stub, const std::string& path, const grpc::Slice& request) {
  grpc::ByteBuffer buffer(&request, 1);
  grpc::ByteBuffer response;
  auto ctx = Deadline();
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(ctx.get(), path, grpc::StubOptions(), &buffer, &response, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

class AuthTest : public ::testing::Test {
 protected:
  AuthTest() : coordinator_(Jobs(2), "127.0.0.1:0", kToken) {}

  // Every unary method of `service`, called with an empty request on `channel`: the codes.
  std::vector<std::pair<std::string, grpc::Status>> CallEveryUnaryMethod(
      const std::string& service, const std::shared_ptr<grpc::Channel>& channel) {
    const auto* descriptor =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service);
    EXPECT_NE(descriptor, nullptr) << service;
    std::vector<std::pair<std::string, grpc::Status>> out;
    if (!descriptor) return out;
    grpc::GenericStub stub(channel);
    for (int i = 0; i < descriptor->method_count(); ++i) {
      const auto* method = descriptor->method(i);
      if (method->client_streaming() || method->server_streaming()) continue;
      std::string path = absl::StrCat("/", service, "/", method->name());
      grpc::Slice empty("", 0);
      out.emplace_back(path, CallRaw(stub, path, empty));
    }
    return out;
  }

  // Both workers, as agents of `address` sending `token` (empty: none), connected.
  void ConnectWorkers(const std::string& address, const std::string& token) {
    for (int i = 0; i < 2; ++i) {
      agents_[i] = std::make_unique<CoordinationAgent>();
      AgentConfig config;
      config.coordinator_address = address;
      config.auth_token = token;
      config.job_name = "worker";
      config.task_id = i;
      ASSERT_TRUE(agents_[i]->Initialize(config).ok());
    }
    std::thread other([&] { EXPECT_TRUE(agents_[1]->Connect().ok()); });
    EXPECT_TRUE(agents_[0]->Connect().ok());
    other.join();
  }

  void TearDown() override {
    for (auto& agent : agents_) {
      if (agent) agent->CancelPendingCalls();
    }
  }

  TestCoordinator coordinator_;
  std::unique_ptr<CoordinationAgent> agents_[2];
};

TEST_F(AuthTest, EveryMethodOfEveryProtocolRefusesACallWithoutTheToken) {
  int methods = 0;
  for (const std::string& token : {std::string(), std::string("someone-elses-token")}) {
    auto channel = ChannelTo(coordinator_.address(), token);
    for (const char* service :
         {"tensorflow.CoordinationService", "xla.coordination.CoordinationService",
          "xla.DistributedRuntimeService", "cohort.v1.Coordinator"}) {
      for (const auto& [path, status] : CallEveryUnaryMethod(service, channel)) {
        ++methods;
        EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
            << path << " with token \"" << token << "\": " << status.error_message();
        EXPECT_NE(status.error_message().find(token.empty() ? "has none" : "not this"),
                  std::string::npos)
            << path << ": " << status.error_message();
      }
    }
    // The streams too.
    auto cohort = v1::Coordinator::NewStub(channel);
    auto ctx = Deadline();
    auto watch = cohort->WatchKeys(ctx.get(), v1::WatchKeysRequest());
    v1::WatchKeysResponse event;
    EXPECT_FALSE(watch->Read(&event));
    EXPECT_EQ(watch->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
    auto park_ctx = Deadline();
    auto park = cohort->Park(park_ctx.get());
    v1::ParkResponse answer;
    EXPECT_FALSE(park->Read(&answer));
    EXPECT_EQ(park->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  // The tensorflow protocol alone has more than 20 methods: the walk saw them.
  EXPECT_GT(methods, 80);
  EXPECT_EQ(coordinator_.service().ParkedCalls(ParkKind::kRegister), 0);
}

TEST_F(AuthTest, ARefusedCallChangesNothing) {
  auto stub = tf::CoordinationService::NewStub(ChannelTo(coordinator_.address(), ""));
  tf::InsertKeyValueRequest insert;
  insert.mutable_kv()->set_key("k");
  insert.mutable_kv()->set_value("v");
  tf::InsertKeyValueResponse inserted;
  EXPECT_EQ(stub->InsertKeyValue(Deadline().get(), insert, &inserted).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(coordinator_.service().TryGetKeyValue("k").status().code(),
            absl::StatusCode::kNotFound);

  // The probe of the issue: an anonymous error report must not put a task into error.
  tf::ReportErrorToServiceRequest report;
  report.set_error_code(13);
  report.set_error_message("anonymous");
  report.mutable_error_origin()->set_job_name("worker");
  report.mutable_error_origin()->set_task_id(1);
  tf::ReportErrorToServiceResponse reported;
  EXPECT_EQ(stub->ReportErrorToService(Deadline().get(), report, &reported).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  auto states = coordinator_.service().GetTaskStates({TaskName{"worker", 1}});
  ASSERT_TRUE(states.ok());
  EXPECT_NE((*states)[0].state, TaskState::kError);
}

TEST_F(AuthTest, CallsWithTheTokenWorkAndHttpStaysOpen) {
  auto stub = tf::CoordinationService::NewStub(ChannelTo(coordinator_.address(), kToken));
  tf::InsertKeyValueRequest insert;
  insert.mutable_kv()->set_key("k");
  insert.mutable_kv()->set_value("v");
  tf::InsertKeyValueResponse inserted;
  grpc::Status status = stub->InsertKeyValue(Deadline().get(), insert, &inserted);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(*coordinator_.service().TryGetKeyValue("k"), "v");

  // Two agents with the token register and share a key.
  ConnectWorkers(coordinator_.address(), kToken);
  ASSERT_TRUE(agents_[0]->InsertKeyValue("shared", "x").ok());
  EXPECT_EQ(*agents_[1]->GetKeyValue("shared"), "x");

  for (const char* path : {"/metrics", "/healthz", "/readyz"}) {
    int code = 0;
    HttpGet(absl::StrCat("http://127.0.0.1:", coordinator_.http_port(), path), &code);
    EXPECT_EQ(code, 200) << path;
  }
}

TEST_F(AuthTest, TheSidecarProxyAttachesTheTokenForClientsThatHaveNone) {
  ProxyOptions options;
  options.listen = "127.0.0.1:0";
  options.upstream.address = coordinator_.address();
  options.upstream.auth_token = kToken;
  ProxyServer proxy(options);
  ASSERT_TRUE(proxy.Start().ok());
  ASSERT_TRUE(proxy.backend().AwaitLink(UpstreamBackend::Link::kConnected, absl::Seconds(20)));
  // An unmodified client (no token) behind the proxy.
  ConnectWorkers(absl::StrCat("127.0.0.1:", proxy.port()), /*token=*/"");
  ASSERT_TRUE(agents_[0]->InsertKeyValue("through", "proxy").ok());
  EXPECT_EQ(*coordinator_.service().TryGetKeyValue("through"), "proxy");
  for (auto& agent : agents_) agent->CancelPendingCalls();
}

TEST_F(AuthTest, AProxyWithAWrongTokenGetsNothingThrough) {
  ProxyOptions options;
  options.listen = "127.0.0.1:0";
  options.upstream.address = coordinator_.address();
  options.upstream.auth_token = "wrong";
  const TaskState before =
      coordinator_.service().GetTaskStates({TaskName{"worker", 0}})->at(0).state;
  ProxyServer proxy(options);
  ASSERT_TRUE(proxy.Start().ok());
  EXPECT_FALSE(proxy.backend().AwaitLink(UpstreamBackend::Link::kConnected, absl::Seconds(1)));
  CoordinationAgent agent;
  AgentConfig config;
  config.coordinator_address = absl::StrCat("127.0.0.1:", proxy.port());
  config.job_name = "worker";
  config.task_id = 0;
  config.register_timeout = absl::Seconds(1);
  ASSERT_TRUE(agent.Initialize(config).ok());
  EXPECT_FALSE(agent.Connect().ok());
  EXPECT_EQ(coordinator_.service().ParkedCalls(ParkKind::kRegister), 0);
  EXPECT_EQ(coordinator_.service().GetTaskStates({TaskName{"worker", 0}})->at(0).state, before);
  EXPECT_NE(before, TaskState::kConnected);
}

// gRPC checks a message's size as it reads it. With a limit of about 2 MiB here, an 8 MiB call
// refused for its token and not for its size was refused before its message was read; the
// same call with the token is refused for its size.
TEST(AuthBeforeReadTest, ACallWithoutTheTokenIsRefusedBeforeItsMessageIsRead) {
  ServiceConfig config = Jobs(2);
  config.key_value.max_value_bytes = 1 << 20;
  TestCoordinator coordinator(config, "127.0.0.1:0", kToken);
  const std::string big(8 << 20, 'x');
  grpc::Slice slice(big);
  struct Case {
    std::string token;
    grpc::StatusCode code;
    std::string says;
  };
  for (const Case& c : {Case{"", grpc::StatusCode::UNAUTHENTICATED, "has none"},
                        Case{"someone-elses-token", grpc::StatusCode::UNAUTHENTICATED, "not this"},
                        Case{kToken, grpc::StatusCode::RESOURCE_EXHAUSTED, "larger than max"}}) {
    grpc::GenericStub stub(ChannelTo(coordinator.address(), c.token));
    for (const char* path : {"/tensorflow.CoordinationService/InsertKeyValue",
                             "/cohort.v1.Coordinator/GetClusterSnapshot"}) {
      grpc::Status status = CallRaw(stub, path, slice);
      EXPECT_EQ(status.error_code(), c.code)
          << path << " with token \"" << c.token << "\": " << status.error_message();
      EXPECT_NE(status.error_message().find(c.says), std::string::npos)
          << path << ": " << status.error_message();
    }
  }
}

TEST(IsLoopbackListenAddressTest, OnlyAddressesThisMachineAloneReaches) {
  for (const char* address :
       {"127.0.0.1:8476", "127.0.0.2:0", "127.255.255.254:1", "[::1]:8476", "localhost:9",
        "LOCALHOST:9", "[::ffff:127.0.0.1]:1", "unix:/tmp/s", "unix-abstract:x"}) {
    EXPECT_TRUE(IsLoopbackListenAddress(address)) << address;
  }
  for (const char* address : {"0.0.0.0:8476", "[::]:8476", "10.0.0.7:9478", "128.0.0.1:1",
                              "[::ffff:10.0.0.7]:1", "example.com:80", "[::1:1", "", ":8476"}) {
    EXPECT_FALSE(IsLoopbackListenAddress(address)) << address;
  }
}

TEST(AuthTokenFileTest, IsReadStrictly) {
  std::string dir = ::testing::TempDir();
  auto write = [&](const std::string& name, const std::string& content) {
    std::string path = absl::StrCat(dir, "/", name);
    std::ofstream(path) << content;
    return path;
  };
  auto good = ReadAuthTokenFile(write("good", "  tok-123\n"), "--auth-token-file");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(*good, "tok-123");
  auto empty = ReadAuthTokenFile(write("empty", "\n\n"), "--auth-token-file");
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("is empty"), std::string::npos);
  auto spaced = ReadAuthTokenFile(write("spaced", "two words\n"), "--auth-token-file");
  EXPECT_EQ(spaced.status().code(), absl::StatusCode::kInvalidArgument);
  auto missing = ReadAuthTokenFile(dir + "/no-such-file", "--auth-token-file");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("--auth-token-file"), std::string::npos);
}

}  // namespace
}  // namespace cohort::testing
