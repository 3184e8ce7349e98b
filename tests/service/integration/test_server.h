#pragma once
// A real coordinator on a loopback port, for tests that talk to it over gRPC.

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "service/core/coordination_service.h"
#include "service/server/coordinator_metrics.h"
#include "service/server/coordinator_server.h"
#include "tensorflow/grpc_payload.pb.h"

namespace cohort::testing {

class TestCoordinator {
 public:
  // `auth_token`: the token every call must carry (--auth-token-file); empty: none.
  explicit TestCoordinator(ServiceConfig config, std::string listen = "127.0.0.1:0",
                           std::string auth_token = "")
      : metrics_(registry_) {
    const int max_message_bytes = MaxMessageBytes(config);
    auto service = CoordinationService::Create(std::move(config), &clock_, &metrics_);
    EXPECT_TRUE(service.ok()) << service.status();
    service_ = std::move(*service);
    metrics_.Attach(service_.get());
    ServerOptions options;
    options.listen = std::move(listen);
    options.http_listen = "127.0.0.1:0";
    options.auth_token = std::move(auth_token);
    options.max_receive_message_bytes = max_message_bytes;
    server_ = std::make_unique<CoordinatorServer>(service_.get(), &registry_, options);
    auto s = server_->Start();
    EXPECT_TRUE(s.ok()) << s;
  }
  ~TestCoordinator() { server_->Shutdown(absl::UnavailableError("test over")); }

  std::string address() const { return absl::StrCat("127.0.0.1:", server_->grpc_port()); }
  std::shared_ptr<grpc::Channel> Channel() const {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    return grpc::CreateCustomChannel(address(), grpc::InsecureChannelCredentials(), args);
  }
  CoordinationService& service() { return *service_; }
  // Whether `task` has arrived at the open instance of barrier `id` (and waits there).
  bool ArrivedAtBarrier(const std::string& id, const TaskName& task) const {
    for (const BarrierSnapshot& barrier : service_->OpenBarriers()) {
      if (barrier.id != id) continue;
      for (const TaskName& arrived : barrier.arrived) {
        if (arrived == task) return true;
      }
    }
    return false;
  }
  MetricsRegistry& registry() { return registry_; }
  int http_port() const { return server_->http_port(); }

 private:
  RealClock clock_;
  MetricsRegistry registry_;
  CoordinatorMetrics metrics_;
  std::unique_ptr<CoordinationService> service_;
  std::unique_ptr<CoordinatorServer> server_;
};

inline ServiceConfig Jobs(int workers, absl::Duration heartbeat = absl::Seconds(10)) {
  ServiceConfig config;
  config.jobs.push_back({"worker", workers});
  config.heartbeat_timeout = heartbeat;
  config.shutdown_barrier_timeout = absl::Seconds(10);
  return config;
}

// The payloads a client finds in a status's details.
inline std::map<std::string, std::string> Payloads(const grpc::Status& status) {
  tensorflow::distributed_runtime::GrpcPayloadContainer container;
  EXPECT_TRUE(container.ParseFromString(status.error_details()));
  return {container.payloads().begin(), container.payloads().end()};
}

inline std::unique_ptr<grpc::ClientContext> Deadline(absl::Duration d = absl::Seconds(20)) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(absl::ToInt64Milliseconds(d)));
  return ctx;
}

}  // namespace cohort::testing
