// xla.DistributedRuntimeService (old jaxlib) over real gRPC on loopback.
#include <future>

#include "tests/service/integration/test_server.h"
#include "xla/distributed_runtime.grpc.pb.h"

namespace cohort::testing {
namespace {

class DistributedRuntimeTest : public ::testing::Test {
 protected:
  DistributedRuntimeTest()
      : coordinator_(Jobs(2)),
        stub_(xla::DistributedRuntimeService::NewStub(coordinator_.Channel())) {}

  uint64_t Connect(int node, int protocol_version = 1) {
    return Connect(*stub_, node, protocol_version);
  }
  uint64_t Connect(xla::DistributedRuntimeService::Stub& stub, int node, int protocol_version) {
    xla::ConnectRequest request;
    request.set_protocol_version(protocol_version);
    request.set_node_id(node);
    request.set_client_id(500 + node);
    xla::ConnectResponse response;
    grpc::Status s = stub.Connect(Deadline().get(), request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response.session_id();
  }

  TestCoordinator coordinator_;
  std::unique_ptr<xla::DistributedRuntimeService::Stub> stub_;
};

TEST_F(DistributedRuntimeTest, ConnectEnumerateKeyValueAndShutdown) {
  auto other = std::async(std::launch::async, [this] { return Connect(1); });
  uint64_t session = Connect(0);
  EXPECT_EQ(other.get(), session);
  EXPECT_EQ(session, coordinator_.service().service_incarnation());

  auto enumerate = [&](int node, int devices) {
    xla::EnumerateDevicesRequest request;
    request.set_session_id(session);
    xla::LocalTopologyProto local;
    local.set_node_id(node);
    for (int d = devices - 1; d >= 0; --d) {
      auto* device = local.add_devices();
      device->set_local_device_ordinal(d);
      device->set_name("gpu");
    }
    request.set_local_topology(local.SerializeAsString());
    xla::EnumerateDevicesResponse response;
    EXPECT_TRUE(stub_->EnumerateDevices(Deadline().get(), request, &response).ok());
    xla::GlobalTopologyProto global;
    EXPECT_TRUE(global.ParseFromString(response.global_topology()));
    return global;
  };
  auto other_topology = std::async(std::launch::async, [&] { return enumerate(1, 3); });
  xla::GlobalTopologyProto global = enumerate(0, 2);
  other_topology.get();
  ASSERT_EQ(global.nodes_size(), 2);
  EXPECT_EQ(global.nodes(0).node_id(), 0);
  EXPECT_EQ(global.nodes(0).devices(0).global_device_id(), 0);
  EXPECT_EQ(global.nodes(0).devices(1).global_device_id(), 1);
  EXPECT_EQ(global.nodes(1).devices(0).local_device_ordinal(), 0);
  EXPECT_EQ(global.nodes(1).devices(2).global_device_id(), 4);

  xla::KeyValueGetRequest get;
  get.set_session_id(session);
  get.set_key("k");
  get.set_timeout_milliseconds(100);
  xla::KeyValueGetResponse gr;
  EXPECT_EQ(stub_->KeyValueGet(Deadline().get(), get, &gr).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  xla::KeyValueSetRequest set;
  set.set_session_id(session);
  set.set_key("k");
  set.set_value("v");
  xla::KeyValueSetResponse sr;
  ASSERT_TRUE(stub_->KeyValueSet(Deadline().get(), set, &sr).ok());
  get.set_timeout_milliseconds(5000);
  ASSERT_TRUE(stub_->KeyValueGet(Deadline().get(), get, &gr).ok());
  EXPECT_TRUE(gr.found());
  EXPECT_EQ(gr.value(), "v");

  xla::HeartbeatRequest hb;
  hb.set_session_id(session);
  hb.set_node_id(0);
  xla::HeartbeatResponse hr;
  EXPECT_TRUE(stub_->Heartbeat(Deadline().get(), hb, &hr).ok());
  hb.set_session_id(session + 1);
  EXPECT_EQ(stub_->Heartbeat(Deadline().get(), hb, &hr).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);

  auto shutdown = [&](int node) {
    xla::ShutdownRequest request;
    request.set_session_id(session);
    request.set_node_id(node);
    xla::ShutdownResponse response;
    return stub_->Shutdown(Deadline().get(), request, &response);
  };
  auto other_shutdown = std::async(std::launch::async, [&] { return shutdown(1); });
  EXPECT_TRUE(shutdown(0).ok());
  EXPECT_TRUE(other_shutdown.get().ok());
}

// A stub on a channel of its own: another client process, as far as the server can tell.
std::unique_ptr<xla::DistributedRuntimeService::Stub> OwnStub(TestCoordinator& coordinator) {
  grpc::ChannelArguments args;
  args.SetInt("cohort.test.unique", rand());  // no subchannel sharing between stubs
  return xla::DistributedRuntimeService::NewStub(
      grpc::CreateCustomChannel(coordinator.address(), grpc::InsecureChannelCredentials(), args));
}

TEST_F(DistributedRuntimeTest, WaitAtBarrierWaitsForEveryNodeAndTimesOutNamingTheMissing) {
  auto other = std::async(std::launch::async, [this] { return Connect(1); });
  uint64_t session = Connect(0);
  other.get();
  auto arrive = [&](int node, const std::string& id, int timeout_ms) {
    xla::WaitAtBarrierRequest request;
    request.set_session_id(session);
    request.set_barrier_id(id);
    request.set_node_id(node);
    request.set_timeout_milliseconds(timeout_ms);
    xla::WaitAtBarrierResponse response;
    return stub_->WaitAtBarrier(Deadline().get(), request, &response);
  };
  auto first = std::async(std::launch::async, [&] { return arrive(1, "ready", 10'000); });
  EXPECT_TRUE(arrive(0, "ready", 10'000).ok());
  EXPECT_TRUE(first.get().ok());
  grpc::Status late = arrive(0, "alone", 200);
  EXPECT_EQ(late.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_NE(late.error_message().find("/job:worker/task:1"), std::string::npos)
      << late.error_message();
  EXPECT_EQ(arrive(0, "bad", 0).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// jaxlib 0.4 sends ShutdownRequest with the session only: the node is the one that
// connected from the same peer.
TEST_F(DistributedRuntimeTest, ShutdownWithoutANodeIdIsTheConnectedPeersNode) {
  auto other_stub = OwnStub(coordinator_);
  auto other = std::async(std::launch::async, [&] { return Connect(*other_stub, 1, 3); });
  uint64_t session = Connect(0, 3);
  other.get();
  auto shutdown = [&](xla::DistributedRuntimeService::Stub& stub) {
    xla::ShutdownRequest request;
    request.set_session_id(session);  // no node_id, as jaxlib 0.4.13
    xla::ShutdownResponse response;
    return stub.Shutdown(Deadline().get(), request, &response);
  };
  auto one = std::async(std::launch::async, [&] { return shutdown(*other_stub); });
  EXPECT_TRUE(shutdown(*stub_).ok());
  EXPECT_TRUE(one.get().ok());
}

TEST_F(DistributedRuntimeTest, HeartbeatsAnswerTheErrorPropagatedToTheJob) {
  auto other = std::async(std::launch::async, [this] { return Connect(1); });
  uint64_t session = Connect(0);
  other.get();
  ASSERT_TRUE(coordinator_.service()
                  .ReportError({"worker", 1}, absl::InternalError("node 1 lost its GPU"))
                  .ok());
  xla::HeartbeatRequest hb;
  hb.set_session_id(session);
  hb.set_node_id(0);
  xla::HeartbeatResponse hr;
  grpc::Status s = stub_->Heartbeat(Deadline().get(), hb, &hr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(s.error_message().find("node 1 lost its GPU"), std::string::npos) << s.error_message();
}

// Protocol version 3 (jaxlib 0.4) puts a boot id in field 2 and the devices in field 3.
TEST_F(DistributedRuntimeTest, EnumerateDevicesSpeaksEachNodesLayout) {
  uint64_t session = 0;
  auto other = std::async(std::launch::async, [this] { return Connect(1, 1); });
  session = Connect(0, 3);
  other.get();
  xla::LocalTopologyProtoV3 v3;
  v3.set_node_id(0);
  v3.set_boot_id("boot-0");
  v3.add_devices()->set_name("cuda:0");
  xla::LocalTopologyProto v1;
  v1.set_node_id(1);
  v1.add_devices()->set_name("cuda:0");
  auto enumerate = [&](const std::string& local) {
    xla::EnumerateDevicesRequest request;
    request.set_session_id(session);
    request.set_local_topology(local);
    xla::EnumerateDevicesResponse response;
    EXPECT_TRUE(stub_->EnumerateDevices(Deadline().get(), request, &response).ok());
    return response.global_topology();
  };
  auto old_answer =
      std::async(std::launch::async, [&] { return enumerate(v1.SerializeAsString()); });
  xla::GlobalTopologyProtoV3 global;
  ASSERT_TRUE(global.ParseFromString(enumerate(v3.SerializeAsString())));
  ASSERT_EQ(global.nodes_size(), 2);
  EXPECT_EQ(global.nodes(0).boot_id(), "boot-0");
  EXPECT_EQ(global.nodes(1).devices(0).global_device_id(), 1);
  xla::GlobalTopologyProto old_global;
  ASSERT_TRUE(old_global.ParseFromString(old_answer.get()));
  ASSERT_EQ(old_global.nodes_size(), 2);
  EXPECT_EQ(old_global.nodes(0).devices(0).name(), "cuda:0");
  EXPECT_EQ(old_global.nodes(1).devices(0).global_device_id(), 1);
}

}  // namespace
}  // namespace cohort::testing
