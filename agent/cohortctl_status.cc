// cohortctl's status, tasks and objects: the cluster and the task runtime as tables or JSON.
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "agent/cohortctl.h"
#include "agent/grpc_status.h"
#include "agent/runtime_views.h"
#include "cohort/runtime/v1/services.grpc.pb.h"
#include "common/failure_reason.h"
#include "nlohmann/json.hpp"

namespace cohort::ctl {
namespace {

using Json = nlohmann::json;

// At most `width` characters of `text`, on one line, with "..." when cut.
std::string Clip(const std::string& text, size_t width) {
  std::string line = OneLine(text);
  if (line.size() <= width) return line;
  return line.substr(0, width - 3) + "...";
}

const char* StateName(v1::TaskState state) {
  switch (state) {
    case v1::UNINITIALIZED:
      return "UNINITIALIZED";
    case v1::DISCONNECTED:
      return "DISCONNECTED";
    case v1::CONNECTED:
      return "CONNECTED";
    case v1::ERROR:
      return "ERROR";
    default:
      return "UNKNOWN";
  }
}

// The reason of a task in error, by its stable name ("heartbeat_timeout"); a number this
// cohortctl does not know (a newer coordinator's) as "reason_N".
std::string ReasonName(const v1::TaskSnapshot& task) {
  std::optional<FailureReason> reason = FailureReasonFromNumber(task.reason());
  return reason ? FailureReasonName(*reason) : absl::StrCat("reason_", task.reason());
}

Json TaskJson(const v1::TaskSnapshot& task) {
  Json out = {{"job", task.job()},
              {"task", task.task_id()},
              {"state", StateName(task.state())},
              {"incarnation", absl::StrCat(absl::Hex(task.incarnation()))},
              {"auxiliary", task.auxiliary()}};
  out["seconds_since_heartbeat"] =
      task.seconds_since_heartbeat() < 0 ? Json() : Json(task.seconds_since_heartbeat());
  if (task.error_code() != 0) {
    out["error"] = {
        {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(task.error_code()))},
        {"message", task.error_message()},
        {"reason", ReasonName(task)}};
  }
  // What its heartbeats carried last (a sidecar's measure of its workload); absent: none.
  if (task.has_step()) out["step"] = task.step();
  if (task.has_busy_seconds_per_step()) {
    out["busy_seconds_per_step"] = task.busy_seconds_per_step();
  }
  return out;
}

Json SnapshotJson(const v1::ClusterSnapshot& snapshot) {
  Json tasks = Json::array(), barriers = Json::array();
  for (const auto& task : snapshot.tasks()) tasks.push_back(TaskJson(task));
  for (const auto& b : snapshot.barriers()) {
    barriers.push_back(
        {{"id", b.id()},
         {"counter", b.counter()},
         {"open_seconds", b.open_seconds()},
         {"seconds_to_deadline", b.seconds_to_deadline()},
         {"arrived", std::vector<std::string>(b.arrived().begin(), b.arrived().end())},
         {"missing", std::vector<std::string>(b.missing().begin(), b.missing().end())}});
  }
  return {{"service_incarnation", absl::StrCat(absl::Hex(snapshot.service_incarnation()))},
          {"default_job", snapshot.default_job()},
          {"cluster_registered", snapshot.cluster_registered()},
          {"job_error", snapshot.job_error().empty() ? Json() : Json(snapshot.job_error())},
          {"tasks", tasks},
          {"barriers", barriers},
          {"key_value",
           {{"keys", snapshot.key_count()},
            {"bytes", snapshot.key_bytes()},
            {"revision", snapshot.key_revision()}}}};
}

void PrintTasks(const v1::ClusterSnapshot& snapshot) {
  std::printf("%-24s %-14s %-18s %-10s %-10s %-12s %-17s %s\n", "TASK", "STATE", "INCARNATION",
              "HEARTBEAT", "STEP", "BUSY S/STEP", "REASON", "ERROR");
  for (const auto& task : snapshot.tasks()) {
    std::string name = absl::StrCat(task.job(), "/", task.task_id(), task.auxiliary() ? "*" : "");
    std::string heartbeat = task.seconds_since_heartbeat() < 0
                                ? "-"
                                : absl::StrFormat("%.1fs", task.seconds_since_heartbeat());
    std::string incarnation =
        task.incarnation() == 0 ? "-" : absl::StrCat(absl::Hex(task.incarnation()));
    // A task that never registered and one that registered and left (shut down, reset) are
    // both DISCONNECTED to the coordinator; the table tells them apart.
    const bool never = task.state() == v1::DISCONNECTED && task.incarnation() == 0 &&
                       task.seconds_since_heartbeat() < 0;
    std::string reason = task.error_code() == 0 ? "-" : ReasonName(task);
    std::string step = task.has_step() ? absl::StrCat(task.step()) : "-";
    std::string busy = task.has_busy_seconds_per_step()
                           ? absl::StrFormat("%.3f", task.busy_seconds_per_step())
                           : "-";
    std::printf("%-24s %-14s %-18s %-10s %-10s %-12s %-17s %s\n", name.c_str(),
                never ? "NOT-REGISTERED" : StateName(task.state()), incarnation.c_str(),
                heartbeat.c_str(), step.c_str(), busy.c_str(), reason.c_str(),
                Clip(task.error_message(), 60).c_str());
  }
}

// The task runtime's view: its tasks and the scheduler's tables.
struct RuntimeView {
  runtime::v1::TaskInfoReply tasks;
  runtime::v1::SchedulerInfoReply scheduler;
};

absl::StatusOr<RuntimeView> FetchRuntime(Client& client) {
  auto stub = ::Scheduler::NewStub(client.channel());
  RuntimeView view;
  grpc::Status s = stub->TaskInfo(client.Context().get(), {}, &view.tasks);
  if (s.ok()) s = stub->SchedulerInfo(client.Context().get(), {}, &view.scheduler);
  if (!s.ok()) return FromGrpcStatus(s);
  return view;
}

}  // namespace

absl::StatusOr<v1::ClusterSnapshot> Snapshot(Client& client) {
  v1::ClusterSnapshot snapshot;
  auto status = client.cohort().GetClusterSnapshot(client.Context().get(), {}, &snapshot);
  if (!status.ok()) return FromGrpcStatus(status);
  return snapshot;
}

int ShowStatus(Client& client) {
  auto snapshot = Snapshot(client);
  if (!snapshot.ok()) return Fail(snapshot.status());
  if (client.json()) {
    std::cout << SnapshotJson(*snapshot).dump(2) << "\n";
    return 0;
  }
  int connected = 0, errors = 0, workload = 0;
  for (const auto& task : snapshot->tasks()) {
    if (task.auxiliary()) continue;
    ++workload;
    connected += task.state() == v1::CONNECTED;
    errors += task.state() == v1::ERROR;
  }
  std::printf(
      "coordinator incarnation %s, default job \"%s\": %d/%d workload tasks connected, "
      "%d in error%s\n",
      absl::StrCat(absl::Hex(snapshot->service_incarnation())).c_str(),
      snapshot->default_job().c_str(), connected, workload, errors,
      snapshot->cluster_registered() ? "" : ", still registering");
  if (!snapshot->job_error().empty()) {
    // Propagated to every task: the job has failed, even while its tasks still show CONNECTED
    // (until they stop or miss their heartbeats).
    std::printf("the job failed: %s\n", Clip(snapshot->job_error(), 200).c_str());
  }
  std::printf("key-value: %lld keys, %lld bytes, revision %lld\n\n",
              static_cast<long long>(snapshot->key_count()),
              static_cast<long long>(snapshot->key_bytes()),
              static_cast<long long>(snapshot->key_revision()));
  PrintTasks(*snapshot);
  if (workload < snapshot->tasks_size()) std::printf("(* auxiliary task)\n");
  if (snapshot->barriers_size() > 0) {
    std::printf("\n%-24s %-8s %-8s %-10s %s\n", "BARRIER", "COUNTER", "OPEN", "DEADLINE",
                "MISSING");
    for (const auto& b : snapshot->barriers()) {
      std::vector<std::string> missing(b.missing().begin(), b.missing().end());
      std::printf("%-24s %-8lld %-8s %-10s %s\n", b.id().c_str(),
                  static_cast<long long>(b.counter()),
                  absl::StrFormat("%.1fs", b.open_seconds()).c_str(),
                  absl::StrFormat("%.1fs", b.seconds_to_deadline()).c_str(),
                  absl::StrJoin(missing, " ").c_str());
    }
  }
  return 0;
}

// The job's tasks (the coordination protocols'); with --runtime, or in the table when the
// task runtime is in use, the task runtime's tasks too.
int ShowTasks(Client& client, bool runtime_only) {
  absl::StatusOr<RuntimeView> runtime = FetchRuntime(client);
  if (runtime_only) {
    if (!runtime.ok()) return Fail(runtime.status());
    if (client.json()) {
      std::cout << RuntimeTasksJson(runtime->tasks, runtime->scheduler).dump(2) << "\n";
    } else {
      std::cout << RuntimeTasksTable(runtime->tasks, runtime->scheduler);
    }
    return 0;
  }
  auto snapshot = Snapshot(client);
  if (!snapshot.ok()) return Fail(snapshot.status());
  if (client.json()) {
    Json tasks = Json::array();
    for (const auto& task : snapshot->tasks()) tasks.push_back(TaskJson(task));
    std::cout << tasks.dump(2) << "\n";
    return 0;
  }
  PrintTasks(*snapshot);
  if (runtime.ok() && RuntimeInUse(runtime->tasks, runtime->scheduler)) {
    std::cout << "\n" << RuntimeTasksTable(runtime->tasks, runtime->scheduler);
  }
  return 0;
}

int ShowObjects(Client& client) {
  absl::StatusOr<RuntimeView> runtime = FetchRuntime(client);
  if (!runtime.ok()) return Fail(runtime.status());
  if (client.json()) {
    std::cout << ObjectsJson(runtime->scheduler).dump(2) << "\n";
  } else {
    std::cout << ObjectsTable(runtime->scheduler);
  }
  return 0;
}

}  // namespace cohort::ctl
