// libFuzzer target: every RPC handler of every protocol the coordinator serves
// (tensorflow.CoordinationService, xla.coordination.CoordinationService,
// xla.DistributedRuntimeService, cohort.v1.Coordinator), bytes in, through gRPC's own
// decoding and the protocol adapters, into a real CoordinationService.
//
// The input is a sequence of calls, each a 1-byte method selector (an index into every
// method of the four services, in descriptor order), a 2-byte little-endian length and that
// many bytes of request message. Calls go over an in-process channel to a server that holds
// the adapters as cohort-coordinator does. A call that parks (a barrier, a blocking get) is
// cancelled after a few milliseconds, which exercises the cancellation path too. Streaming
// methods get each of their messages the same way. State carries over between inputs, as in
// a coordinator that serves many clients; the store's limits keep it small.
//
// Whatever the bytes, every call ends with a status and the process neither crashes, leaks
// nor reads out of bounds (ASan, UBSan).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/grpcpp.h"
#include "service/backend/local_backend.h"
#include "service/core/coordination_service.h"
#include "service/rpc/cohort_service.h"
#include "service/rpc/distributed_runtime_service.h"
#include "service/rpc/rpc_call.h"
#include "service/rpc/tensorflow_service.h"
#include "service/rpc/xla_service.h"
#include "spdlog/spdlog.h"
#include "tests/fuzz/generic_calls.h"

namespace {

const char* const kServices[] = {
    "tensorflow.CoordinationService",
    "xla.coordination.CoordinationService",
    "xla.DistributedRuntimeService",
    "cohort.v1.Coordinator",
};
// How long a call may take before it is cancelled: long enough for any call that does not
// park, short enough to keep many executions a second.
constexpr absl::Duration kPatience = absl::Milliseconds(1);

std::unique_ptr<cohort::CoordinationService> NewService(const cohort::Clock* clock) {
  cohort::ServiceConfig config;
  config.jobs.push_back({"worker", 4});
  config.jobs.push_back({"sidecar", 2, /*auxiliary=*/true});
  config.register_barrier = false;
  config.heartbeat_timeout = absl::Seconds(2);
  config.register_timeout = absl::Seconds(1);
  config.shutdown_barrier_timeout = absl::Milliseconds(50);
  config.key_value.max_value_bytes = 4096;
  config.key_value.max_total_bytes = 1 << 20;
  config.parked.max_per_task = 8;
  config.parked.max_total = 1024;
  config.barriers.max_open = 64;
  config.barriers.max_finished = 64;
  auto service = cohort::CoordinationService::Create(std::move(config), clock);
  if (!service.ok()) std::abort();
  return std::move(*service);
}

class Harness {
 public:
  Harness()
      : metrics_(registry_),
        service_(NewService(&clock_)),
        backend_(service_.get()),
        tensorflow_(&backend_, &metrics_, nullptr),
        xla_(&backend_, &metrics_, nullptr),
        distributed_(&backend_, &metrics_, nullptr),
        cohort_(&backend_, &metrics_, nullptr) {
    grpc::ServerBuilder builder;
    builder.RegisterService(&tensorflow_);
    builder.RegisterService(&xla_);
    builder.RegisterService(&distributed_);
    builder.RegisterService(&cohort_);
    server_ = builder.BuildAndStart();
    if (!server_) std::abort();
    caller_ = std::make_unique<cohort::fuzzing::GenericCaller>(
        server_->InProcessChannel(grpc::ChannelArguments()),
        std::vector<std::string>(std::begin(kServices), std::end(kServices)), kPatience);
  }

  void Call(size_t selector, const uint8_t* data, size_t size) {
    caller_->Call(selector, data, size);
    service_->RunTimers();
  }

 private:
  cohort::RealClock clock_;
  cohort::MetricsRegistry registry_;
  cohort::RpcMetrics metrics_;
  std::unique_ptr<cohort::CoordinationService> service_;
  cohort::LocalBackend backend_;
  cohort::TensorflowCoordinationService tensorflow_;
  cohort::XlaCoordinationService xla_;
  cohort::DistributedRuntimeService distributed_;
  cohort::CohortCoordinatorService cohort_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<cohort::fuzzing::GenericCaller> caller_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Harness* harness = [] {
    spdlog::set_level(spdlog::level::off);
    // Requests with strings that are not UTF-8 fail to parse, each with a protobuf log line.
    google::protobuf::SetLogHandler(nullptr);
    return new Harness();
  }();
  while (size >= 3) {
    const size_t selector = data[0];
    size_t length = data[1] | (static_cast<size_t>(data[2]) << 8);
    data += 3;
    size -= 3;
    if (length > size) length = size;
    harness->Call(selector, data, length);
    data += length;
    size -= length;
  }
  return 0;
}
