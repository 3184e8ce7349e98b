// libFuzzer target: every RPC handler of the task runtime (the protocol's Scheduler and
// ObjStore, cohort's LocalStore), bytes in, through gRPC's decoding into a real scheduler
// (with limits small enough that inputs reach them) and a real object store registered with
// it; and the transport's reports (a worker or store lost, a delivery failed) in between.
//
// The input is a sequence of calls, each a 1-byte selector, a 2-byte little-endian length and
// that many bytes: a selector below the number of methods calls that method (services in the
// order above, methods in descriptor order) with the bytes as its request; the next three
// report a worker lost, a store lost, or a delivery failed, naming small ids from the bytes.
// The effects the scheduler records are drained and dropped: no worker runs here. State
// carries over between inputs, as in a scheduler that serves many clients.
//
// Whatever the bytes, every call ends with a status and the process neither crashes, leaks
// nor reads out of bounds (ASan, UBSan).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cohort/runtime/v1/services.pb.h"
#include "common/clock.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/grpcpp.h"
#include "runtime/objstore/object_store_server.h"
#include "runtime/rpc/scheduler_service.h"
#include "runtime/scheduler/task_scheduler.h"
#include "spdlog/spdlog.h"
#include "tests/fuzz/generic_calls.h"

namespace {

constexpr absl::Duration kPatience = absl::Milliseconds(1);

// Limits small enough that inputs reach them: past each, calls are refused and change nothing.
cohort::runtime::SchedulerOptions SmallLimits() {
  cohort::runtime::SchedulerOptions options;
  options.limits.max_tasks = 64;
  options.limits.task_history = 8;  // puts and reported tasks leave it, and ids are forgotten
  options.limits.max_objects = 128;
  options.limits.max_workers = 8;
  options.limits.max_stores = 4;
  options.limits.max_functions = 8;
  options.limits.max_export_bytes = 4096;
  options.limits.max_ids_per_call = 16;
  return options;
}

class Harness {
 public:
  Harness() : scheduler_(clock_, SmallLimits()), service_(&scheduler_, nullptr) {
    // services.proto declares services only, so nothing else links its descriptor into the
    // binary, and the generic caller finds the services by name in the generated pool. A
    // volatile use keeps the reference that links it.
    const void* volatile services_descriptor =
        &descriptor_table_cohort_2fruntime_2fv1_2fservices_2eproto;
    (void)services_descriptor;
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    if (!server_ || port == 0) std::abort();
    cohort::runtime::ObjectStoreOptions options;
    options.listen = "127.0.0.1:0";
    options.scheduler = absl::StrCat("127.0.0.1:", port);
    options.capacity_bytes = 1 << 20;
    store_ = std::make_unique<cohort::runtime::ObjectStoreServer>(options);
    if (!store_->Start().ok()) std::abort();
    scheduler_calls_ = std::make_unique<cohort::fuzzing::GenericCaller>(
        server_->InProcessChannel(grpc::ChannelArguments()), std::vector<std::string>{"Scheduler"},
        kPatience);
    store_calls_ = std::make_unique<cohort::fuzzing::GenericCaller>(
        grpc::CreateChannel(store_->address(), grpc::InsecureChannelCredentials()),
        std::vector<std::string>{"ObjStore", "cohort.runtime.v1.LocalStore"}, kPatience);
  }

  void Call(size_t selector, const uint8_t* data, size_t size) {
    size_t on_scheduler = scheduler_calls_->method_count();
    size_t on_store = store_calls_->method_count();
    selector %= on_scheduler + on_store + 3;
    uint8_t a = size > 0 ? data[0] : 0;
    uint8_t b = size > 1 ? data[1] : 0;
    if (selector < on_scheduler) {
      scheduler_calls_->Call(selector, data, size);
    } else if (selector < on_scheduler + on_store) {
      store_calls_->Call(selector - on_scheduler, data, size);
    } else if (selector == on_scheduler + on_store) {
      scheduler_.WorkerLost(a % 16, "fuzz");
    } else if (selector == on_scheduler + on_store + 1) {
      scheduler_.StoreLost(a % 4, "fuzz");
    } else {
      scheduler_.DeliveryFailed(a % 4, b % 64, "fuzz");
    }
    scheduler_.TakeEffects();
  }

 private:
  cohort::RealClock clock_;
  cohort::runtime::TaskScheduler scheduler_;
  cohort::runtime::SchedulerService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<cohort::runtime::ObjectStoreServer> store_;
  std::unique_ptr<cohort::fuzzing::GenericCaller> scheduler_calls_;
  std::unique_ptr<cohort::fuzzing::GenericCaller> store_calls_;
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A scheduler keeps every task it was given (its lineage): a fresh one now and then keeps
  // a long run's memory bounded.
  static std::unique_ptr<Harness> harness;
  static int inputs = 0;
  if (inputs++ % 5000 == 0) {
    harness.reset();
    harness = std::make_unique<Harness>();
  }
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
