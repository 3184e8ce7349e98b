#include "service/proxy/upstream_messages.h"

#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/failure_reason.h"
#include "service/core/errors.h"

namespace cohort {
namespace {

TaskState FromWire(int state) {
  switch (state) {
    case 1:
      return TaskState::kUninitialized;
    case 3:
      return TaskState::kConnected;
    case 4:
      return TaskState::kError;
    default:
      return TaskState::kDisconnected;
  }
}

// "/job:NAME/task:N", as BarrierSnapshot lists tasks.
TaskName ParseTaskName(const std::string& text) {
  TaskName task;
  absl::string_view rest = text;
  if (!absl::ConsumePrefix(&rest, "/job:")) return task;
  size_t slash = rest.rfind("/task:");
  if (slash == absl::string_view::npos) return task;
  task.job = std::string(rest.substr(0, slash));
  if (!absl::SimpleAtoi(rest.substr(slash + 6), &task.id)) task.id = -1;
  return task;
}

std::vector<JobConfig> JobsOf(const v1::ClusterSnapshot& snapshot) {
  std::map<std::string, JobConfig> jobs;
  for (const v1::TaskSnapshot& task : snapshot.tasks()) {
    JobConfig& job = jobs[task.job()];
    job.name = task.job();
    job.num_tasks = std::max(job.num_tasks, task.task_id() + 1);
    job.auxiliary = task.auxiliary();
  }
  std::vector<JobConfig> out;
  for (auto& [name, job] : jobs) out.push_back(std::move(job));
  return out;
}

}  // namespace

bool IsOutage(const absl::Status& status) {
  if (status.ok()) return false;
  auto info = GetServiceError(status);
  if (!info) {
    switch (status.code()) {
      case absl::StatusCode::kUnavailable:
      case absl::StatusCode::kCancelled:
      case absl::StatusCode::kUnknown:
      case absl::StatusCode::kInternal:
      case absl::StatusCode::kAborted:
        return true;
      default:
        return false;
    }
  }
  return status.code() == absl::StatusCode::kUnavailable && !info->source &&
         !info->is_reported_error;
}

tensorflow::CoordinatedTask ToWireTask(const TaskName& task) {
  tensorflow::CoordinatedTask out;
  out.set_job_name(task.job);
  out.set_task_id(task.id);
  return out;
}

tensorflow::CohortTaskProgress ToWire(const TaskProgress& progress) {
  tensorflow::CohortTaskProgress out;
  if (progress.step) out.set_step(*progress.step);
  if (progress.busy_seconds_per_step)
    out.set_busy_seconds_per_step(*progress.busy_seconds_per_step);
  return out;
}

TaskStateInfo FromWire(const tensorflow::CoordinatedTaskStateInfo& info) {
  TaskStateInfo out;
  out.task = TaskName{info.task().job_name(), info.task().task_id()};
  out.state = FromWire(static_cast<int>(info.state()));
  out.incarnation = info.incarnation();
  if (info.error_code() != 0) {
    ServiceErrorInfo source;
    source.is_reported_error = info.error_payload().is_reported_error();
    if (info.error_payload().has_source_task()) {
      source.source = TaskName{info.error_payload().source_task().job_name(),
                               info.error_payload().source_task().task_id()};
    }
    out.error = WithServiceError(
        absl::Status(static_cast<absl::StatusCode>(info.error_code()), info.error_message()),
        source);
  }
  return out;
}

CoordinatorSnapshot FromWire(const v1::ClusterSnapshot& snapshot, absl::Time now) {
  CoordinatorSnapshot view;
  view.taken_at = now;
  view.service_incarnation = snapshot.service_incarnation();
  view.default_job = snapshot.default_job();
  view.cluster_registered = snapshot.cluster_registered();
  if (!snapshot.job_error().empty()) view.job_error = absl::UnknownError(snapshot.job_error());
  for (const v1::TaskSnapshot& task : snapshot.tasks()) {
    CoordinatorSnapshot::Task t;
    t.info.task = TaskName{task.job(), task.task_id()};
    t.info.state = FromWire(static_cast<int>(task.state()));
    t.info.incarnation = task.incarnation();
    t.info.last_heartbeat = task.seconds_since_heartbeat() < 0
                                ? absl::InfinitePast()
                                : now - absl::Seconds(task.seconds_since_heartbeat());
    if (task.error_code() != 0) {
      t.info.error =
          absl::Status(static_cast<absl::StatusCode>(task.error_code()), task.error_message());
    }
    // A reason of a newer coordinator that this proxy does not know passes as unspecified.
    t.info.reason = FailureReasonFromNumber(task.reason()).value_or(FailureReason::kUnspecified);
    if (task.has_step()) t.info.progress.step = task.step();
    if (task.has_busy_seconds_per_step()) {
      t.info.progress.busy_seconds_per_step = task.busy_seconds_per_step();
    }
    t.auxiliary = task.auxiliary();
    view.tasks.push_back(std::move(t));
  }
  for (const v1::BarrierSnapshot& barrier : snapshot.barriers()) {
    BarrierSnapshot b;
    b.id = barrier.id();
    b.counter = barrier.counter();
    b.started = now - absl::Seconds(barrier.open_seconds());
    b.deadline = now + absl::Seconds(barrier.seconds_to_deadline());
    for (const std::string& task : barrier.arrived()) b.arrived.push_back(ParseTaskName(task));
    for (const std::string& task : barrier.missing()) b.missing.push_back(ParseTaskName(task));
    view.barriers.push_back(std::move(b));
  }
  view.key_values.keys = static_cast<size_t>(snapshot.key_count());
  view.key_values.bytes = static_cast<size_t>(snapshot.key_bytes());
  view.key_values.revision = snapshot.key_revision();
  return view;
}

KnownJobs::KnownJobs(const v1::ClusterSnapshot& snapshot)
    : jobs_(JobsOf(snapshot)), directory_(jobs_, snapshot.default_job()) {}

tensorflow::DeviceInfo WrapDevices(const std::string& devices) {
  tensorflow::DeviceInfo info;
  auto* any = info.add_device();
  any->set_type_url(kOpaqueDevicesType);
  any->set_value(devices);
  return info;
}

std::vector<std::string> UnwrapDevices(const tensorflow::DeviceInfo& cluster) {
  std::vector<std::string> out;
  for (const auto& any : cluster.device()) {
    if (any.type_url() == kOpaqueDevicesType) out.push_back(any.value());
  }
  return out;
}

}  // namespace cohort
