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

  uint64_t Connect(int node) {
    xla::ConnectRequest request;
    request.set_protocol_version(1);
    request.set_node_id(node);
    request.set_client_id(500 + node);
    xla::ConnectResponse response;
    grpc::Status s = stub_->Connect(Deadline().get(), request, &response);
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
    request.mutable_local_topology()->set_node_id(node);
    for (int d = devices - 1; d >= 0; --d) {
      auto* device = request.mutable_local_topology()->add_devices();
      device->set_local_device_ordinal(d);
      device->set_name("gpu");
    }
    xla::EnumerateDevicesResponse response;
    EXPECT_TRUE(stub_->EnumerateDevices(Deadline().get(), request, &response).ok());
    return response.global_topology();
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

}  // namespace
}  // namespace cohort::testing
