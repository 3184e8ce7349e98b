// FailureReporter on its own, against a real coordinator: each report with its typed reason and
// its metric label, and one found before the sidecar's agent connected sent once it does.
#include "sidecar/failure_reporter.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "agent/coordination_agent.h"
#include "common/failure_reason.h"
#include "common/metrics.h"
#include "gtest/gtest.h"
#include "sidecar/task_identity.h"
#include "tests/service/integration/test_server.h"

namespace cohort {
// Its own namespace: the unity builds compile this file with others of its test.
namespace failure_reporter_test {
namespace {

using ::cohort::testing::Jobs;
using ::cohort::testing::TestCoordinator;

const TaskName kSidecar{"sidecar", 0};
const TaskName kWorker{"worker", 0};

ServiceConfig Config() {
  ServiceConfig config = Jobs(1);
  config.jobs.push_back({"sidecar", 1, /*auxiliary=*/true});
  return config;
}

AgentConfig AgentFor(const TaskName& task, const std::string& address) {
  AgentConfig config;
  config.coordinator_address = address;
  config.job_name = task.job;
  config.task_id = task.id;
  config.heartbeat_interval = absl::Milliseconds(200);
  return config;
}

class FailureReporterTest : public ::testing::Test {
 protected:
  FailureReporterTest() {
    EXPECT_TRUE(
        sidecar_.Initialize(AgentFor(kSidecar, coordinator_.address()), [](const absl::Status&) {})
            .ok());
    reporter_.RegisterMetrics();
  }

  TaskStateInfo Info(const TaskName& task) {
    auto states = coordinator_.service().GetTaskStates({task});
    EXPECT_TRUE(states.ok()) << states.status();
    return states.ok() ? states->front() : TaskStateInfo{};
  }
  bool Counted(const std::string& label) {
    return absl::StrContains(registry_.Render(),
                             "cohort_sidecar_errors_reported_total{reason=\"" + label + "\"} 1");
  }

  TestCoordinator coordinator_{Config()};
  MetricsRegistry registry_;
  CoordinationAgent sidecar_;
  FailureReporter reporter_{TaskIdentity{"worker", 0, 1, {}, ""}, &sidecar_, &registry_};
};

TEST_F(FailureReporterTest, AHangFoundBeforeTheAgentConnectedIsReportedOnceItDoes) {
  reporter_.OnHang("no progress for 10m (last: step 7)");
  EXPECT_NE(Info(kSidecar).state, TaskState::kError);

  ASSERT_TRUE(sidecar_.Connect().ok());
  reporter_.SendPending();

  const TaskStateInfo info = Info(kSidecar);
  EXPECT_EQ(info.state, TaskState::kError);
  EXPECT_EQ(info.reason, FailureReason::kHang);
  EXPECT_EQ(info.error.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(info.error.message(),
                                "/job:worker/task:0 is hung: no progress for 10m "
                                "(last: step 7)"))
      << info.error;
  EXPECT_TRUE(Counted("hang")) << registry_.Render();
}

TEST_F(FailureReporterTest, AGpuProblemIsReportedAsAGpuFault) {
  ASSERT_TRUE(sidecar_.Connect().ok());
  gpu::HealthEvent event;
  event.gpu_index = 3;
  event.gpu_uuid = "GPU-3";
  event.xid = 79;
  event.reason = "XID 79 (critical XID event)";
  reporter_.OnGpuProblem(event);

  EXPECT_EQ(Info(kSidecar).reason, FailureReason::kGpuFault);
  EXPECT_EQ(Info(kSidecar).error.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(Counted("xid")) << registry_.Render();
}

TEST_F(FailureReporterTest, AWorkloadThatExitedWhileConnectedIsReportedAsAWorkloadExit) {
  CoordinationAgent worker;
  ASSERT_TRUE(
      worker.Initialize(AgentFor(kWorker, coordinator_.address()), [](const absl::Status&) {})
          .ok());
  ASSERT_TRUE(worker.Connect().ok());
  ASSERT_TRUE(sidecar_.Connect().ok());
  reporter_.OnWorkloadExit("the workload exited with code 1");

  EXPECT_EQ(Info(kSidecar).reason, FailureReason::kWorkloadExit);
  EXPECT_EQ(Info(kSidecar).error.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(Counted("workload_exit")) << registry_.Render();
}

}  // namespace
}  // namespace failure_reporter_test
}  // namespace cohort
