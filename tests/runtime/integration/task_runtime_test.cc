// The task runtime with real processes over loopback: cohort-coordinator (the scheduler),
// cohort-objstore per node, cohort-worker per node, and drivers on the TaskClient library.
// Nodes are loopback addresses of their own (127.0.0.2, 127.0.0.3, ...), so a worker's
// address tells which node it is on.
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "runtime/client/task_client.h"
#include "tests/support/build_paths.h"
#include "tests/support/eventually.h"
#include "tests/support/subprocess.h"

namespace cohort::runtime {
namespace {

using ::cohort::testing::Eventually;
using ::cohort::testing::FreePort;
using ::cohort::testing::Subprocess;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string Bin(const std::string& name) { return ::cohort::testing::BinDir() + "/" + name; }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

v1::Value IntArg(int64_t n) {
  v1::Value v;
  v.mutable_obj()->mutable_int_data()->set_data(n);
  return v;
}

v1::Value RefArg(ObjectId id) {
  v1::Value v;
  v.set_id(id);
  return v;
}

v1::Value StringArg(const std::string& s) {
  v1::Value v;
  v.mutable_obj()->mutable_string_data()->set_data(s);
  return v;
}

// One node: an object store and (optionally) a worker process, on loopback address `host`.
struct Node {
  std::string host;
  std::string store_address;
  std::unique_ptr<Subprocess> store;
  std::unique_ptr<Subprocess> workers;
};

class TaskRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/task-runtime-", getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    scheduler_ = absl::StrCat("127.0.0.1:", FreePort());
    http_ = absl::StrCat("127.0.0.1:", FreePort());
    StartCoordinator({});
  }

  // The coordinator, on the test's port, with `extra` flags; its log appended to.
  void StartCoordinator(const std::vector<std::string>& extra) {
    std::vector<std::string> args{Bin("cohort-coordinator"),
                                  "--listen",
                                  scheduler_,
                                  "--http-listen",
                                  http_,
                                  "--job",
                                  "driver=1",
                                  "--task-liveness-timeout",
                                  "3s",
                                  "--task-retries",
                                  "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    coordinator_ =
        std::make_unique<Subprocess>(args, std::map<std::string, std::string>{},
                                     absl::StrCat(dir_, "/coordinator-", ++coordinators_, ".log"));
  }

  std::string CoordinatorLogs() {
    std::string out;
    for (int i = 1; i <= coordinators_; ++i) {
      absl::StrAppend(&out, "--- coordinator ", i, ":\n",
                      ReadFile(absl::StrCat(dir_, "/coordinator-", i, ".log")));
    }
    return out;
  }

  void TearDown() override {
    // Stores stopped, not killed, so that they remove their shared-memory files.
    for (auto& node : nodes_) {
      if (node->store) node->store->Signal(SIGTERM);
    }
    for (auto& node : nodes_) {
      if (node->store) node->store->Wait(absl::Seconds(20));
    }
    if (HasFailure()) {
      std::cerr << "coordinator logs:\n" << CoordinatorLogs();
      for (size_t i = 0; i < nodes_.size(); ++i) {
        std::cerr << "node " << i << " store log:\n"
                  << ReadFile(absl::StrCat(dir_, "/store-", i, ".log")) << "node " << i
                  << " workers log:\n"
                  << ReadFile(absl::StrCat(dir_, "/workers-", i, ".log"));
      }
    }
  }

  // Starts node i (host 127.0.0.<i+2>) with `workers` C++ workers (0: a store only), given
  // `worker_flags` too.
  Node& AddNode(int workers, const std::string& capacity = "256MiB",
                const std::vector<std::string>& worker_flags = {}) {
    size_t i = nodes_.size();
    Node& node = *nodes_.emplace_back(std::make_unique<Node>());
    node.host = absl::StrCat("127.0.0.", i + 2);
    node.store_address = absl::StrCat(node.host, ":", FreePort());
    node.store = std::make_unique<Subprocess>(
        std::vector<std::string>{Bin("cohort-objstore"), "--listen", node.store_address,
                                 "--scheduler", scheduler_, "--capacity", capacity},
        std::map<std::string, std::string>{}, absl::StrCat(dir_, "/store-", i, ".log"));
    EXPECT_TRUE(Eventually([&] {
      return absl::StrContains(ReadFile(absl::StrCat(dir_, "/store-", i, ".log")),
                               "registered with");
    })) << ReadFile(absl::StrCat(dir_, "/store-", i, ".log"));
    if (workers > 0) {
      std::vector<std::string> args = {Bin("cohort-worker"), "--scheduler", scheduler_,
                                       "--objstore", node.store_address};
      args.insert(args.end(), {"--workers", std::to_string(workers), "--listen-host", node.host});
      args.insert(args.end(), worker_flags.begin(), worker_flags.end());
      node.workers = std::make_unique<Subprocess>(args, std::map<std::string, std::string>{},
                                                  absl::StrCat(dir_, "/workers-", i, ".log"));
    }
    return node;
  }

  std::unique_ptr<TaskClient> Driver(const Node& node) {
    TaskClientOptions options;
    options.scheduler = scheduler_;
    options.objstore = node.store_address;
    options.node_ip = node.host;
    absl::StatusOr<std::unique_ptr<TaskClient>> client = TaskClient::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  v1::ObjStoreInfoReply StoreInfo(const Node& node) {
    auto stub = ::ObjStore::NewStub(
        grpc::CreateChannel(node.store_address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    v1::ObjStoreInfoReply reply;
    grpc::Status s = stub->ObjStoreInfo(&ctx, v1::ObjStoreInfoRequest(), &reply);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return reply;
  }

  std::unique_ptr<::Scheduler::Stub> SchedulerStub() {
    return ::Scheduler::NewStub(
        grpc::CreateChannel(scheduler_, grpc::InsecureChannelCredentials()));
  }

  int64_t GetInt(TaskClient& driver, ObjectId id) {
    absl::StatusOr<v1::Obj> value = driver.Get(id, absl::Seconds(60));
    EXPECT_TRUE(value.ok()) << "object " << id << ": " << value.status();
    if (!value.ok()) return -1;
    EXPECT_TRUE(value->has_int_data()) << value->DebugString();
    return value->int_data().data();
  }

  // One sample of the coordinator's /metrics, e.g. `cohort_tasks{state="queued"}`; -1 if absent.
  double Metric(const std::string& sample) {
    int code = 0;
    std::string text = cohort::testing::HttpGet(absl::StrCat("http://", http_, "/metrics"), &code);
    EXPECT_EQ(code, 200);
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      if (absl::StartsWith(line, sample + " ")) {
        double value = -1;
        EXPECT_TRUE(absl::SimpleAtod(line.substr(sample.size() + 1), &value)) << line;
        return value;
      }
    }
    return -1;
  }

  std::string dir_;
  std::string scheduler_;
  std::string http_;
  std::unique_ptr<Subprocess> coordinator_;
  int coordinators_ = 0;
  std::vector<std::unique_ptr<Node>> nodes_;
};

TEST_F(TaskRuntimeTest, AThousandTaskMapAndAFanInReduceGiveTheClosedFormAndLeaveNothingBehind) {
  Node& a = AddNode(2);
  Node& b = AddNode(2);
  std::unique_ptr<TaskClient> driver = Driver(a);
  ASSERT_NE(driver, nullptr);
  std::vector<ObjectId> held;
  // Map: add(i, i) for i in 1..1000.
  std::vector<ObjectId> level;
  for (int i = 1; i <= 1000; ++i) {
    absl::StatusOr<std::vector<ObjectId>> r = driver->Submit("cohort.add", {IntArg(i), IntArg(i)});
    ASSERT_TRUE(r.ok()) << r.status();
    level.push_back((*r)[0]);
  }
  held = level;
  // Reduce: sum groups of up to 8 until one is left.
  while (level.size() > 1) {
    std::vector<ObjectId> next;
    for (size_t i = 0; i < level.size(); i += 8) {
      std::vector<v1::Value> args;
      for (size_t j = i; j < std::min(level.size(), i + 8); ++j) args.push_back(RefArg(level[j]));
      absl::StatusOr<std::vector<ObjectId>> r = driver->Submit("cohort.sum", args);
      ASSERT_TRUE(r.ok()) << r.status();
      next.push_back((*r)[0]);
    }
    held.insert(held.end(), next.begin(), next.end());
    level = next;
  }
  EXPECT_EQ(GetInt(*driver, level[0]), 1000 * 1001);
  // The last task ends when its worker asks for the next, just after storing the result.
  absl::StatusOr<v1::TaskInfoReply> info;
  EXPECT_TRUE(Eventually([&] {
    info = driver->TaskInfo();
    return info.ok() && info->num_succeeded() == held.size();
  })) << info->DebugString();
  EXPECT_THAT(info->failed_task(), IsEmpty());
  // Both nodes ran tasks: each store holds results.
  EXPECT_THAT(StoreInfo(a).objectid(), ::testing::Not(IsEmpty()));
  EXPECT_THAT(StoreInfo(b).objectid(), ::testing::Not(IsEmpty()));
  ASSERT_TRUE(driver->Release(held).ok());
  EXPECT_TRUE(Eventually([&] {
    return StoreInfo(a).objectid().empty() && StoreInfo(b).objectid().empty();
  })) << "store a: "
      << StoreInfo(a).DebugString() << "store b: " << StoreInfo(b).DebugString();
  absl::StatusOr<v1::SchedulerInfoReply> scheduler = driver->SchedulerInfo();
  ASSERT_TRUE(scheduler.ok());
  EXPECT_THAT(scheduler->reference_count(), ::testing::Each(0));
  EXPECT_EQ(scheduler->reference_count_size(), held.size() + 1) << "indexed by object id";
  EXPECT_THAT(scheduler->operationid(), IsEmpty());
  EXPECT_EQ(scheduler->avail_worker_size(), 4);
  EXPECT_EQ(scheduler->function_table().at("cohort.add").workerid_size(), 4);
  // The same story in the coordinator's metrics.
  EXPECT_EQ(Metric("cohort_tasks_finished_total{outcome=\"succeeded\"}"), held.size());
  EXPECT_EQ(Metric("cohort_tasks_submitted_total"), held.size());
  EXPECT_EQ(Metric("cohort_task_scheduling_seconds_count"), held.size());
  EXPECT_EQ(Metric("cohort_tasks{state=\"running\"}"), 0);
  EXPECT_EQ(Metric("cohort_task_workers"), 4);
  EXPECT_GT(Metric("cohort_object_delivered_bytes_total"), 0) << "the reduce crossed stores";
  EXPECT_EQ(Metric(absl::StrCat("cohort_objstore_objects{objstore=\"1\",address=\"",
                                a.store_address, "\"}")),
            0);
}

TEST_F(TaskRuntimeTest, TheCoordinatorKilledMidRunComesBackFromItsStateDirAndNothingIsLost) {
  // The coordinator keeps its state: start it again with --state-dir.
  coordinator_->Signal(SIGKILL);
  coordinator_->Wait(absl::Seconds(10));
  const std::string state = dir_ + "/state";
  StartCoordinator({"--state-dir", state});
  Node& a = AddNode(2);
  Node& b = AddNode(2);
  std::unique_ptr<TaskClient> driver = Driver(a);
  ASSERT_NE(driver, nullptr);
  ASSERT_TRUE(Eventually([&] {
    auto info = driver->SchedulerInfo();
    return info.ok() && info->avail_worker_size() == 4;
  }));
  // Puts, a map over them among slow tasks (a few seconds in all), and a reduce of the map.
  std::vector<ObjectId> puts, mapped;
  for (int i = 1; i <= 60; ++i) {
    v1::Obj value;
    value.mutable_int_data()->set_data(i);
    absl::StatusOr<ObjectId> id = driver->Put(value);
    ASSERT_TRUE(id.ok()) << id.status();
    puts.push_back(*id);
  }
  for (int i = 0; i < 60; ++i) {
    absl::StatusOr<std::vector<ObjectId>> slow = driver->Submit("cohort.sleep_ms", {IntArg(200)});
    ASSERT_TRUE(slow.ok()) << slow.status();
    absl::StatusOr<std::vector<ObjectId>> r =
        driver->Submit("cohort.add", {RefArg(puts[i]), IntArg(1000)});
    ASSERT_TRUE(r.ok()) << r.status();
    mapped.push_back((*r)[0]);
  }
  // Mid-run: some tasks done, some running, most queued.
  ASSERT_TRUE(Eventually([&] {
    auto info = driver->TaskInfo();
    return info.ok() && info->num_succeeded() >= 10;
  }));
  absl::StatusOr<v1::TaskInfoReply> before = driver->TaskInfo();
  ASSERT_TRUE(before.ok());
  ASSERT_LT(before->num_succeeded(), 100u) << "the run ended before the coordinator was killed";
  coordinator_->Signal(SIGKILL);
  coordinator_->Wait(absl::Seconds(10));
  // While it is gone, the driver goes on submitting: its calls wait for the next coordinator.
  absl::SleepFor(absl::Seconds(1));
  StartCoordinator({"--state-dir", state});
  std::vector<v1::Value> all;
  for (ObjectId id : mapped) all.push_back(RefArg(id));
  absl::StatusOr<std::vector<ObjectId>> total = driver->Submit("cohort.sum", all);
  ASSERT_TRUE(total.ok()) << total.status();
  // Every result, right.
  for (int i = 0; i < 60; ++i) EXPECT_EQ(GetInt(*driver, mapped[i]), i + 1 + 1000) << "task " << i;
  EXPECT_EQ(GetInt(*driver, (*total)[0]), 60 * 61 / 2 + 60 * 1000);
  absl::StatusOr<v1::TaskInfoReply> after;
  EXPECT_TRUE(Eventually([&] {
    after = driver->TaskInfo();
    return after.ok() && after->num_succeeded() == 121u;
  })) << (after.ok() ? after->DebugString() : after.status().ToString());
  EXPECT_THAT(after->failed_task(), IsEmpty());
  // No task failed or was retried, no worker was lost: the workers are the same processes.
  EXPECT_EQ(Metric("cohort_tasks_submitted_total"), 121);
  EXPECT_EQ(Metric("cohort_tasks_retried_total"), 0);
  EXPECT_EQ(Metric("cohort_task_workers"), 4);
  int status = 0;
  EXPECT_EQ(waitpid(a.workers->pid(), &status, WNOHANG), 0) << "node a's workers exited";
  EXPECT_EQ(waitpid(b.workers->pid(), &status, WNOHANG), 0) << "node b's workers exited";
  EXPECT_THAT(ReadFile(absl::StrCat(dir_, "/coordinator-", coordinators_, ".log")),
              HasSubstr("logged changes after it"));
}

TEST_F(TaskRuntimeTest, ObjectsCrossStoresAndAliasesReadAsTheirTarget) {
  Node& a = AddNode(0);
  Node& b = AddNode(0);
  std::unique_ptr<TaskClient> writer = Driver(a);
  std::unique_ptr<TaskClient> reader = Driver(b);
  v1::Obj value;
  value.mutable_string_data()->set_data(std::string(3 << 20, 'x'));  // three chunks
  absl::StatusOr<ObjectId> put = writer->Put(value);
  ASSERT_TRUE(put.ok()) << put.status();
  absl::StatusOr<v1::Obj> got = reader->Get(*put, absl::Seconds(30));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->string_data().data(), value.string_data().data());
  EXPECT_THAT(StoreInfo(b).objectid(), ::testing::Contains(*put));
  // An id with no value of its own, aliased to the put, reads as it on either store.
  v1::PutObjRequest request;
  request.set_workerid(reader->id());
  v1::PutObjReply reply;
  grpc::ClientContext ctx;
  ASSERT_TRUE(SchedulerStub()->PutObj(&ctx, request, &reply).ok());
  ASSERT_TRUE(reader->Alias(reply.objectid(), *put).ok());
  absl::StatusOr<v1::Obj> aliased = writer->Get(reply.objectid(), absl::Seconds(30));
  ASSERT_TRUE(aliased.ok()) << aliased.status();
  EXPECT_EQ(aliased->string_data().data().size(), size_t{3} << 20);
  EXPECT_EQ(reader->Alias(*put, reply.objectid()).code(), absl::StatusCode::kInvalidArgument);
  // Releasing the put's own handle keeps it for the alias; releasing the alias frees both.
  ASSERT_TRUE(writer->Release({*put}).ok());
  EXPECT_THAT(StoreInfo(a).objectid(), ::testing::Contains(*put));
  int status = 0;
  std::string objects = cohort::testing::RunShell(
      absl::StrCat(Bin("cohortctl"), " --coordinator ", scheduler_, " objects -o json"), &status);
  EXPECT_EQ(status, 0) << objects;
  EXPECT_THAT(objects, HasSubstr(absl::StrCat("\"alias_of\": ", *put)));
  EXPECT_THAT(objects, HasSubstr(absl::StrCat("\"id\": ", *put, ",\n    \"references\": 1")));
  ASSERT_TRUE(reader->Release({reply.objectid()}).ok());
  EXPECT_TRUE(Eventually(
      [&] { return StoreInfo(a).objectid().empty() && StoreInfo(b).objectid().empty(); }));
}

TEST_F(TaskRuntimeTest, ATaskThatFailsShowsInTaskInfoAndItsResultReadsAsTheError) {
  Node& a = AddNode(1);
  std::unique_ptr<TaskClient> driver = Driver(a);
  absl::StatusOr<std::vector<ObjectId>> r =
      driver->Submit("cohort.fail", {StringArg("the disk is full")});
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<v1::Obj> got = driver->Get((*r)[0], absl::Seconds(30));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("the disk is full"));
  // A task of it fails too, naming why.
  absl::StatusOr<std::vector<ObjectId>> downstream =
      driver->Submit("cohort.add", {RefArg((*r)[0]), IntArg(1)});
  ASSERT_TRUE(downstream.ok());
  got = driver->Get((*downstream)[0], absl::Seconds(30));
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("the disk is full"));
  absl::StatusOr<v1::TaskInfoReply> info = driver->TaskInfo();
  ASSERT_TRUE(info.ok());
  ASSERT_EQ(info->failed_task_size(), 2);
  EXPECT_EQ(info->failed_task(0).function_name(), "cohort.fail");
  EXPECT_EQ(info->failed_task(0).error_message(), "the disk is full");
  EXPECT_THAT(info->failed_task(0).worker_address(), HasSubstr(a.host));
  // cohortctl shows the same.
  int status = 0;
  std::string table = cohort::testing::RunShell(
      absl::StrCat(Bin("cohortctl"), " --coordinator ", scheduler_, " tasks --runtime"), &status);
  EXPECT_EQ(status, 0) << table;
  EXPECT_THAT(table, HasSubstr("2 failed"));
  EXPECT_THAT(table, HasSubstr("cohort.fail"));
  EXPECT_THAT(table, HasSubstr("the disk is full"));
  std::string json = cohort::testing::RunShell(
      absl::StrCat(Bin("cohortctl"), " --coordinator ", scheduler_, " tasks --runtime -o json"),
      &status);
  EXPECT_EQ(status, 0) << json;
  EXPECT_THAT(json, HasSubstr("\"function\": \"cohort.fail\""));
  // Wrong argument counts fail the task the same way.
  absl::StatusOr<std::vector<ObjectId>> wrong = driver->Submit("cohort.add", {IntArg(1)});
  ASSERT_TRUE(wrong.ok());
  got = driver->Get((*wrong)[0], absl::Seconds(30));
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("takes 2 arguments, got 1"));
}

TEST_F(TaskRuntimeTest, AWorkerKilledMidTaskHasItsTaskRunAgainElsewhere) {
  Node& a = AddNode(1);
  Node& b = AddNode(1);
  std::unique_ptr<TaskClient> driver = Driver(a);
  ASSERT_TRUE(Eventually([&] {
    auto info = driver->SchedulerInfo();
    return info.ok() && info->avail_worker_size() == 2;
  }));
  absl::StatusOr<std::vector<ObjectId>> r = driver->Submit("cohort.sleep_ms", {IntArg(4000)});
  ASSERT_TRUE(r.ok());
  std::string running_on;
  ASSERT_TRUE(Eventually([&] {
    auto info = driver->TaskInfo();
    if (!info.ok() || info->running_task_size() != 1) return false;
    running_on = info->running_task(0).worker_address();
    return true;
  }));
  Node& victim = absl::StartsWith(running_on, a.host + ":") ? a : b;
  victim.workers->Signal(SIGKILL);
  absl::StatusOr<v1::Obj> got = driver->Get((*r)[0], absl::Seconds(60));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->has_empty_data());
  // The result may be read before the scheduler has the report of its task.
  absl::StatusOr<v1::TaskInfoReply> info;
  EXPECT_TRUE(Eventually([&] {
    info = driver->TaskInfo();
    return info.ok() && info->num_succeeded() == 1u;
  })) << (info.ok() ? info->DebugString() : info.status().ToString());
  ASSERT_TRUE(info.ok());
  EXPECT_THAT(info->failed_task(), IsEmpty());
}

TEST_F(TaskRuntimeTest, AWorkerToldToStopFinishesItsTaskAndLeavesThePool) {
  // SIGTERM, as a pod being deleted gets: the running task ends normally, nothing is retried,
  // and the scheduler sends the worker nothing new. At debug level a worker says which tasks
  // it took.
  Node& a = AddNode(1, "256MiB", {"--log-level", "debug"});
  Node& b = AddNode(1, "256MiB", {"--log-level", "debug"});
  std::unique_ptr<TaskClient> driver = Driver(a);
  ASSERT_TRUE(Eventually([&] {
    auto info = driver->SchedulerInfo();
    return info.ok() && info->avail_worker_size() == 2;
  }));
  absl::StatusOr<std::vector<ObjectId>> slow = driver->Submit("cohort.sleep_ms", {IntArg(1500)});
  ASSERT_TRUE(slow.ok());
  std::string running_on;
  ASSERT_TRUE(Eventually([&] {
    auto info = driver->TaskInfo();
    if (!info.ok() || info->running_task_size() != 1) return false;
    running_on = info->running_task(0).worker_address();
    return true;
  }));
  Node& leaving = absl::StartsWith(running_on, a.host + ":") ? a : b;
  const std::string leaving_log = absl::StrCat(dir_, "/workers-", &leaving == &a ? 0 : 1, ".log");
  // TaskInfo lists a task as running from the moment the scheduler sends it; wait until the
  // worker has it (a worker told to stop before it does leaves at once, and the task runs
  // elsewhere).
  ASSERT_TRUE(Eventually([&] {
    return absl::StrContains(ReadFile(leaving_log), "took task cohort.sleep_ms");
  })) << ReadFile(leaving_log);
  EXPECT_EQ(cohort::testing::ThreadsNotBlocking(leaving.workers->pid(), SIGTERM),
            std::vector<std::string>{});
  EXPECT_EQ(cohort::testing::ThreadsNotBlocking(leaving.store->pid(), SIGTERM),
            std::vector<std::string>{});
  leaving.workers->Signal(SIGTERM);
  absl::StatusOr<v1::Obj> got = driver->Get((*slow)[0], absl::Seconds(30));
  ASSERT_TRUE(got.ok()) << got.status();
  cohort::testing::ProcessResult exited = leaving.workers->Wait(absl::Seconds(20));
  EXPECT_EQ(exited.exit_code, 0);
  EXPECT_THAT(ReadFile(leaving_log), HasSubstr("left the pool after its task cohort.sleep_ms"));
  EXPECT_EQ(Metric("cohort_task_workers"), 1);
  EXPECT_EQ(Metric("cohort_tasks_retried_total"), 0);
  // New tasks go to the worker that stayed.
  absl::StatusOr<std::vector<ObjectId>> more = driver->Submit("cohort.add", {IntArg(2), IntArg(3)});
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(GetInt(*driver, (*more)[0]), 5);
  // A result can be read before the scheduler has the worker's report of its task (the object
  // is in the store first): the count catches up.
  absl::StatusOr<v1::TaskInfoReply> info;
  EXPECT_TRUE(Eventually([&] {
    info = driver->TaskInfo();
    return info.ok() && info->num_succeeded() == 2u;
  })) << (info.ok() ? info->DebugString() : info.status().ToString());
  ASSERT_TRUE(info.ok());
  EXPECT_THAT(info->failed_task(), IsEmpty());
}

TEST_F(TaskRuntimeTest, ALostStoreHasItsTaskResultsComputedAgainAndItsPutsReportedLost) {
  Node& a = AddNode(0);
  Node& b = AddNode(1);
  Node& c = AddNode(1);
  std::unique_ptr<TaskClient> driver = Driver(a);
  absl::StatusOr<std::vector<ObjectId>> r = driver->Submit("cohort.add", {IntArg(20), IntArg(22)});
  ASSERT_TRUE(r.ok());
  ObjectId result = (*r)[0];
  ASSERT_TRUE(Eventually([&] {
    auto info = driver->TaskInfo();
    return info.ok() && info->num_succeeded() == 1;
  }));
  bool on_b = !StoreInfo(b).objectid().empty();
  Node& lost = on_b ? b : c;
  // A second driver on the doomed node puts an object only it holds.
  std::unique_ptr<TaskClient> doomed = Driver(lost);
  v1::Obj value;
  value.mutable_int_data()->set_data(7);
  absl::StatusOr<ObjectId> put = doomed->Put(value);
  ASSERT_TRUE(put.ok());
  lost.workers->Signal(SIGKILL);
  lost.store->Signal(SIGKILL);
  EXPECT_EQ(GetInt(*driver, result), 42);
  absl::StatusOr<v1::Obj> gone = driver->Get(*put, absl::Seconds(60));
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(gone.status().message()), HasSubstr("is lost"));
  EXPECT_THAT(std::string(gone.status().message()), HasSubstr(lost.store_address));
}

TEST_F(TaskRuntimeTest, KillWorkersSucceedsOnlyWhenIdleAndTheWorkersExit) {
  Node& a = AddNode(2);
  std::unique_ptr<TaskClient> driver = Driver(a);
  absl::StatusOr<std::vector<ObjectId>> r = driver->Submit("cohort.sleep_ms", {IntArg(1500)});
  ASSERT_TRUE(r.ok());
  absl::StatusOr<bool> killed = driver->KillWorkers();
  ASSERT_TRUE(killed.ok());
  EXPECT_FALSE(*killed);
  ASSERT_TRUE(driver->Get((*r)[0], absl::Seconds(30)).ok());
  ASSERT_TRUE(Eventually([&] {
    auto info = driver->TaskInfo();
    return info.ok() && info->running_task().empty();
  }));
  killed = driver->KillWorkers();
  ASSERT_TRUE(killed.ok());
  EXPECT_TRUE(*killed);
  cohort::testing::ProcessResult exited = a.workers->Wait(absl::Seconds(20));
  EXPECT_EQ(exited.exit_code, 0);
  absl::StatusOr<v1::SchedulerInfoReply> info = driver->SchedulerInfo();
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->function_table().empty());
}

TEST_F(TaskRuntimeTest, AStoreRemovesTheSharedMemoryOfStoresThatDied) {
  std::string stale = "/dev/shm/cohort-store-test-" + std::to_string(getpid());
  std::filesystem::create_directories(stale);
  std::ofstream(stale + "/pid") << 999999999 << "\n";  // no such process
  std::ofstream(stale + "/obj-1-0") << "held memory";
  AddNode(0);
  EXPECT_FALSE(std::filesystem::exists(stale));
}

TEST_F(TaskRuntimeTest, BadCallsGetClearErrorsAndChangeNothing) {
  Node& a = AddNode(1, "1KiB");
  std::unique_ptr<TaskClient> driver = Driver(a);
  auto stub = SchedulerStub();
  {
    grpc::ClientContext ctx;
    v1::ChangeCountRequest request;
    v1::AckReply reply;
    grpc::Status s = stub->IncrementCount(&ctx, request, &reply);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED);
    EXPECT_THAT(s.error_message(), HasSubstr("IncrementRefCount"));
  }
  {
    grpc::ClientContext ctx;
    v1::SubmitTaskRequest request;
    request.set_workerid(driver->id());
    request.mutable_task()->set_name("cohort.add");
    request.mutable_task()->add_arg()->set_id(9999);
    v1::SubmitTaskReply reply;
    grpc::Status s = stub->SubmitTask(&ctx, request, &reply);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_THAT(s.error_message(), HasSubstr("9999"));
  }
  {
    grpc::ClientContext ctx;
    v1::RegisterWorkerRequest request;
    request.set_objstore_address("127.0.0.1:1");
    v1::RegisterWorkerReply reply;
    grpc::Status s = stub->RegisterWorker(&ctx, request, &reply);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  }
  v1::Obj big;
  big.mutable_string_data()->set_data(std::string(4096, 'x'));
  absl::StatusOr<ObjectId> put = driver->Put(big);
  EXPECT_EQ(put.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(put.status().message()), HasSubstr("--capacity"));
  EXPECT_THAT(StoreInfo(a).objectid(), IsEmpty());
  absl::StatusOr<v1::SchedulerInfoReply> info = driver->SchedulerInfo();
  ASSERT_TRUE(info.ok());
  EXPECT_THAT(info->computation_graph().operation(), ::testing::SizeIs(1))
      << "only the PutObj whose value was refused";
}

}  // namespace
}  // namespace cohort::runtime
