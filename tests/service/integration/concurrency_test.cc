// Several hundred tasks at once through register, key-value traffic, barriers and shutdown,
// over real gRPC. `make test` also runs it in the ASan/UBSan build.
#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/service/integration/test_server.h"
#include "xla/coordination_service.grpc.pb.h"

namespace cohort::testing {
namespace {

namespace xc = xla::coordination;
constexpr int kTasks = 300;

TEST(ConcurrencyTest, ManyTasksRegisterExchangeKeysPassBarriersAndShutDown) {
  ServiceConfig config = Jobs(kTasks);
  config.shutdown_barrier_timeout = absl::Seconds(60);
  TestCoordinator coordinator(config);
  auto channel = coordinator.Channel();
  const uint64_t service_incarnation = coordinator.service().service_incarnation();
  std::atomic<int> failures{0};
  std::vector<std::string> errors(kTasks);

  auto task = [&](int id) {
    auto stub = xc::CoordinationService::NewStub(channel);
    auto fail = [&](const std::string& what, const grpc::Status& s) {
      ++failures;
      errors[id] = absl::StrCat(what, ": ", s.error_message());
    };
    xc::Incarnations inc;
    inc.set_task_incarnation(1000 + id);
    inc.set_service_incarnation(service_incarnation);

    xc::RegisterTaskRequest reg;
    reg.set_source_task_id(id);
    reg.set_incarnation(1000 + id);
    xc::RegisterTaskResponse reg_r;
    if (auto s = stub->RegisterTask(Deadline(absl::Seconds(120)).get(), reg, &reg_r); !s.ok()) {
      return fail("register", s);
    }
    xc::InsertKeyValueRequest insert;
    *insert.mutable_incarnations() = inc;
    insert.mutable_kv()->set_key(absl::StrCat("addresses/", id));
    insert.mutable_kv()->set_value(absl::StrCat("10.0.0.", id % 250, ":1234"));
    xc::InsertKeyValueResponse ir;
    if (auto s = stub->InsertKeyValue(Deadline().get(), insert, &ir); !s.ok())
      return fail("insert", s);

    xc::IncrementKeyValueRequest incr;
    *incr.mutable_incarnations() = inc;
    incr.set_key("arrivals");
    incr.set_increment(1);
    xc::IncrementKeyValueResponse incr_r;
    if (auto s = stub->IncrementKeyValue(Deadline().get(), incr, &incr_r); !s.ok()) {
      return fail("increment", s);
    }
    for (int round = 0; round < 3; ++round) {
      xc::BarrierRequest barrier;
      *barrier.mutable_incarnations() = inc;
      barrier.set_barrier_id("step");
      barrier.set_counter(round);
      barrier.set_barrier_timeout_in_ms(120'000);
      barrier.set_source_task_id(id);
      xc::BarrierResponse br;
      if (auto s = stub->Barrier(Deadline(absl::Seconds(120)).get(), barrier, &br); !s.ok()) {
        return fail(absl::StrCat("barrier ", round), s);
      }
      if (round == 0) {
        // Everyone has written its address before the first barrier released anyone.
        xc::GetKeyValueDirRequest dir;
        *dir.mutable_incarnations() = inc;
        dir.set_directory_key("addresses");
        xc::GetKeyValueDirResponse dr;
        if (auto s = stub->GetKeyValueDir(Deadline().get(), dir, &dr); !s.ok())
          return fail("dir", s);
        if (dr.kv_size() != kTasks) {
          ++failures;
          errors[id] = absl::StrCat("dir get saw ", dr.kv_size(), " addresses");
          return;
        }
      }
    }
    xc::ShutdownTaskRequest shutdown;
    *shutdown.mutable_incarnations() = inc;
    shutdown.set_source_task_id(id);
    xc::ShutdownTaskResponse sr;
    if (auto s = stub->ShutdownTask(Deadline(absl::Seconds(120)).get(), shutdown, &sr); !s.ok()) {
      return fail("shutdown", s);
    }
  };

  std::vector<std::thread> threads;
  for (int i = 0; i < kTasks; ++i) threads.emplace_back(task, i);
  for (auto& t : threads) t.join();

  for (int i = 0; i < kTasks; ++i) EXPECT_EQ(errors[i], "") << "task " << i;
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(*coordinator.service().TryGetKeyValue("arrivals"), std::to_string(kTasks));
  for (const auto& t : coordinator.service().AllTasks()) {
    EXPECT_EQ(t.state, TaskState::kDisconnected) << t.task.ToString();
  }
  for (int k = 0; k < kNumParkKinds; ++k) {
    EXPECT_EQ(coordinator.service().ParkedCalls(static_cast<ParkKind>(k)), 0)
        << ParkKindName(static_cast<ParkKind>(k));
  }
}

}  // namespace
}  // namespace cohort::testing
