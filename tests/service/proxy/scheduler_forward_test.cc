// The pod's endpoint passes the task runtime's /Scheduler/ calls on: a real scheduler service
// behind a token, a ProxyServer in front of it holding the token, clients that have none.
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "cohort/runtime/v1/services.grpc.pb.h"
#include "common/clock.h"
#include "common/grpc_auth.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "runtime/rpc/scheduler_service.h"
#include "runtime/scheduler/task_scheduler.h"
#include "service/proxy/proxy_server.h"

namespace cohort {
namespace {

namespace v1 = ::cohort::runtime::v1;

class SchedulerForwardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auth_ = std::make_unique<CallAuth>("s3cret");
    service_ = std::make_unique<runtime::SchedulerService>(&scheduler_, auth_.get());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    ProxyOptions options;
    options.listen = "127.0.0.1:0";
    options.upstream.address = absl::StrCat("127.0.0.1:", port);
    options.upstream.auth_token = "s3cret";
    proxy_ = std::make_unique<ProxyServer>(options);
    ASSERT_TRUE(proxy_->Start().ok());
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", proxy_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = ::Scheduler::NewStub(channel_);
    upstream_ = ::Scheduler::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    proxy_->Shutdown(absl::UnavailableError("test over"));
    server_->Shutdown();
  }
  std::unique_ptr<grpc::ClientContext> Context(const std::string& call = "") {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!call.empty()) ctx->AddMetadata(runtime::kCallMetadata, call);
    return ctx;
  }

  ManualClock clock_;
  runtime::TaskScheduler scheduler_{clock_, {}};
  std::unique_ptr<CallAuth> auth_;
  std::unique_ptr<runtime::SchedulerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ProxyServer> proxy_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<::Scheduler::Stub> stub_;
  std::unique_ptr<::Scheduler::Stub> upstream_;
};

TEST_F(SchedulerForwardTest, CallsWithoutTheTokenReachTheSchedulerThroughTheEndpoint) {
  // Straight to the scheduler, without the token: refused.
  v1::RegisterObjStoreRequest store;
  store.set_objstore_address("127.0.0.2:7000");
  v1::RegisterObjStoreReply store_reply;
  EXPECT_EQ(upstream_->RegisterObjStore(Context().get(), store, &store_reply).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  // Through the endpoint, which adds it: served, answers and errors alike.
  ASSERT_TRUE(stub_->RegisterObjStore(Context().get(), store, &store_reply).ok());
  EXPECT_EQ(store_reply.objstoreid(), 1u);
  v1::RegisterWorkerRequest driver;
  driver.set_objstore_address("127.0.0.2:7000");
  driver.set_is_driver(true);
  v1::RegisterWorkerReply driver_reply;
  ASSERT_TRUE(stub_->RegisterWorker(Context().get(), driver, &driver_reply).ok());
  v1::RequestObjRequest missing;
  missing.set_workerid(driver_reply.workerid());
  missing.set_objectid(77);
  v1::AckReply ack;
  grpc::Status s = stub_->RequestObj(Context().get(), missing, &ack);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "no object 77");
}

TEST_F(SchedulerForwardTest, TheCallNumberGoesThroughSoARepeatTakesEffectOnce) {
  v1::RegisterObjStoreRequest store;
  store.set_objstore_address("127.0.0.2:7000");
  v1::RegisterObjStoreReply store_reply;
  ASSERT_TRUE(stub_->RegisterObjStore(Context().get(), store, &store_reply).ok());
  v1::RegisterWorkerRequest driver;
  driver.set_objstore_address("127.0.0.2:7000");
  driver.set_is_driver(true);
  v1::RegisterWorkerReply driver_reply;
  ASSERT_TRUE(stub_->RegisterWorker(Context().get(), driver, &driver_reply).ok());
  const std::string number = absl::StrCat(driver_reply.workerid(), "/1");
  v1::PutObjRequest put;
  put.set_workerid(driver_reply.workerid());
  v1::PutObjReply first, again, other;
  ASSERT_TRUE(stub_->PutObj(Context(number).get(), put, &first).ok());
  ASSERT_TRUE(stub_->PutObj(Context(number).get(), put, &again).ok());
  ASSERT_TRUE(
      stub_->PutObj(Context(absl::StrCat(driver_reply.workerid(), "/2")).get(), put, &other).ok());
  EXPECT_EQ(again.objectid(), first.objectid());
  EXPECT_NE(other.objectid(), first.objectid());
  // A malformed number is the caller's error, named.
  grpc::Status bad = stub_->PutObj(Context("seven").get(), put, &other);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad.error_message().find("cohort-call"), std::string::npos) << bad.error_message();
}

TEST_F(SchedulerForwardTest, OtherUnknownMethodsAreRefusedNamingThem) {
  grpc::GenericStub generic(channel_);
  grpc::Slice empty;
  grpc::ByteBuffer request(&empty, 1), reply;
  grpc::Status got;
  absl::Notification done;
  auto ctx = Context();
  generic.UnaryCall(ctx.get(), "/ObjStore/ObjStoreInfo", grpc::StubOptions(), &request, &reply,
                    [&](const grpc::Status& s) {
                      got = s;
                      done.Notify();
                    });
  done.WaitForNotification();
  EXPECT_EQ(got.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_NE(got.error_message().find("/ObjStore/ObjStoreInfo is not served here"),
            std::string::npos)
      << got.error_message();
}

}  // namespace
}  // namespace cohort
