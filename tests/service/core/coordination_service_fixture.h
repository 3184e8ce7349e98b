#pragma once
// A CoordinationService on a ManualClock, with helpers for the calls tests make most.

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "service/core/coordination_service.h"
#include "tests/service/core/callback_result.h"

namespace cohort::testing {

inline const TaskName kW0{"worker", 0};
inline const TaskName kW1{"worker", 1};
inline const TaskName kW2{"worker", 2};
inline const TaskName kSidecar0{"sidecar", 0};
inline const TaskName kSidecar1{"sidecar", 1};

// True when the status's message names `task`.
inline bool Mentions(const absl::Status& status, const TaskName& task) {
  return absl::StrContains(status.message(), task.ToString());
}

class CoordinationServiceTest : public ::testing::Test {
 protected:
  // Three workload tasks and an auxiliary job of two. The heartbeat timeout is long, so that
  // tests that move time for other reasons do not lose tasks to it.
  static ServiceConfig Config() {
    ServiceConfig config;
    config.jobs.push_back({"worker", 3});
    config.jobs.push_back({"sidecar", 2, /*auxiliary=*/true});
    config.heartbeat_timeout = absl::Hours(1);
    config.register_timeout = absl::Seconds(60);
    config.shutdown_barrier_timeout = absl::Seconds(30);
    return config;
  }

  void SetUp() override { Start(Config()); }

  void Start(ServiceConfig config) {
    auto service = CoordinationService::Create(std::move(config), &clock_);
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = std::move(*service);
  }

  StatusResult Register(const TaskName& task, uint64_t incarnation = 1) {
    StatusResult result;
    service_->RegisterTask(task, incarnation, service_->NewWaiterId(), result.Callback());
    return result;
  }

  // Registers every workload task with incarnation 1 and passes the register barrier.
  void RegisterWorkers() {
    std::vector<StatusResult> results;
    for (const TaskName& task : {kW0, kW1, kW2}) results.push_back(Register(task));
    for (const StatusResult& r : results) {
      ASSERT_TRUE(r.fired());
      ASSERT_TRUE(r.value().ok()) << r.value();
    }
  }

  StatusResult Poll(const TaskName& task, WaiterId waiter = 0) {
    StatusResult result;
    if (waiter == 0) waiter = service_->NewWaiterId();
    service_->PollForError(task, waiter, result.Callback());
    return result;
  }

  StatusResult Shutdown(const TaskName& task) {
    StatusResult result;
    service_->ShutdownTask(task, service_->NewWaiterId(), result.Callback());
    return result;
  }

  TaskStateInfo Info(const TaskName& task) {
    auto states = service_->GetTaskStates({task});
    EXPECT_TRUE(states.ok()) << states.status();
    return states.ok() ? states->front() : TaskStateInfo{};
  }
  TaskState StateOf(const TaskName& task) { return Info(task).state; }

  void Advance(absl::Duration d) {
    clock_.Advance(d);
    service_->RunTimers();
  }

  ManualClock clock_;
  std::unique_ptr<CoordinationService> service_;
};

}  // namespace cohort::testing
