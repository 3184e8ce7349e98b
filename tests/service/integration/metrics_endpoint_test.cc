// /metrics of a live coordinator after real traffic: promtool-clean and carrying the
// documented families with the values the traffic implies.
#include <cstdio>
#include <future>
#include <string>

#include "absl/strings/str_cat.h"
#include "tensorflow/coordination_service.grpc.pb.h"
#include "tests/service/integration/test_server.h"
#include "tests/support/eventually.h"

namespace cohort::testing {
namespace {

namespace tf = tensorflow;

std::string RunCommand(const std::string& command, int* status) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  *status = pclose(pipe);
  return out;
}

TEST(MetricsEndpointTest, ScrapeIsPromtoolCleanAndReflectsTraffic) {
  TestCoordinator coordinator(Jobs(2));
  auto stub = tf::CoordinationService::NewStub(coordinator.Channel());
  auto reg = [&](int id) {
    tf::RegisterTaskRequest r;
    r.mutable_source_task()->set_job_name("worker");
    r.mutable_source_task()->set_task_id(id);
    r.set_incarnation(id + 1);
    tf::RegisterTaskResponse resp;
    return stub->RegisterTask(Deadline().get(), r, &resp);
  };
  auto other = std::async(std::launch::async, [&] { return reg(1); });
  ASSERT_TRUE(reg(0).ok());
  ASSERT_TRUE(other.get().ok());
  tf::InsertKeyValueRequest insert;
  insert.mutable_kv()->set_key("k");
  insert.mutable_kv()->set_value("12345");
  tf::InsertKeyValueResponse ir;
  ASSERT_TRUE(stub->InsertKeyValue(Deadline().get(), insert, &ir).ok());
  tf::TryGetKeyValueRequest missing;
  missing.set_key("absent");
  tf::TryGetKeyValueResponse tr;
  ASSERT_FALSE(stub->TryGetKeyValue(Deadline().get(), missing, &tr).ok());
  // A barrier that stays open, with one task missing.
  tf::BarrierRequest barrier;
  barrier.set_barrier_id("open-one");
  barrier.set_barrier_timeout_in_ms(60'000);
  barrier.mutable_source_task()->set_job_name("worker");
  auto ctx = Deadline();
  tf::BarrierResponse br;
  auto parked =
      std::async(std::launch::async, [&] { return stub->Barrier(ctx.get(), barrier, &br); });
  ASSERT_TRUE(Eventually([&] { return !coordinator.service().OpenBarriers().empty(); }));

  std::string file = absl::StrCat(::testing::TempDir(), "/metrics-", getpid(), ".txt");
  int status = -1;
  RunCommand(
      absl::StrCat("curl -sf -o ", file, " http://127.0.0.1:", coordinator.http_port(), "/metrics"),
      &status);
  ASSERT_EQ(status, 0) << "curl could not scrape /metrics";
  std::string lint = RunCommand(absl::StrCat("promtool check metrics < ", file, " 2>&1"), &status);
  EXPECT_EQ(status, 0) << lint;
  EXPECT_EQ(lint, "");
  std::string text = RunCommand(absl::StrCat("cat ", file), &status);
  for (const char* line : {
           "cohort_coordinator_tasks{job=\"worker\",state=\"connected\"} 2",
           "cohort_coordinator_kv_keys 1",
           "cohort_coordinator_kv_bytes 6",
           "cohort_coordinator_barriers_open 1",
           "cohort_coordinator_barrier_missing_tasks{barrier=\"open-one\"} 1",
           "cohort_coordinator_parked_calls{kind=\"barrier\"} 1",
           "cohort_coordinator_cluster_registered 1",
           "cohort_coordinator_rpcs_total{protocol=\"tensorflow\",method=\"RegisterTask\",code="
           "\"OK\"} 2",
           "cohort_coordinator_rpcs_total{protocol=\"tensorflow\",method=\"TryGetKeyValue\",code="
           "\"NOT_FOUND\"} 1",
           "cohort_coordinator_rpc_duration_seconds_count{protocol=\"tensorflow\",method="
           "\"InsertKeyValue\"} 1",
           "cohort_coordinator_task_seconds_since_heartbeat{job=\"worker\",task=\"1\"}",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line << "\n" << text;
  }
  ctx->TryCancel();
  parked.get();
  std::remove(file.c_str());
}

}  // namespace
}  // namespace cohort::testing
