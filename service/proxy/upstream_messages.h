#pragma once
// What the upstream forwarder reads back from the coordinator's messages: task states,
// the cluster snapshot, the job directory, and device descriptions wrapped for the trip.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cohort/v1/coordinator.pb.h"
#include "common/task_progress.h"
#include "service/backend/coordination_backend.h"
#include "service/core/job_directory.h"
#include "tensorflow/coordination_service.pb.h"

namespace cohort {

// The call got no answer from the coordinator: it is down, restarting, or cannot be
// reached. Every answer of the service carries a CoordinationServiceError payload (see
// CoreStatusFromGrpc); a stopping coordinator answers parked calls UNAVAILABLE with one that
// names no task.
bool IsOutage(const absl::Status& status);

tensorflow::CoordinatedTask ToWireTask(const TaskName& task);
// HeartbeatRequest.cohort_progress: the fields the progress has, the others absent.
tensorflow::CohortTaskProgress ToWire(const TaskProgress& progress);
TaskStateInfo FromWire(const tensorflow::CoordinatedTaskStateInfo& info);
// Relative times in the snapshot are read against `now`.
CoordinatorSnapshot FromWire(const v1::ClusterSnapshot& snapshot, absl::Time now);

// The coordinator's jobs as its snapshot shows them, so that the proxy resolves task names
// (and refuses bad ones) exactly as the coordinator would.
class KnownJobs {
 public:
  explicit KnownJobs(const v1::ClusterSnapshot& snapshot);
  KnownJobs(const KnownJobs&) = delete;
  KnownJobs& operator=(const KnownJobs&) = delete;
  const JobDirectory& directory() const { return directory_; }

 private:
  std::vector<JobConfig> jobs_;
  JobDirectory directory_;  // points into jobs_
};

// A task's opaque device description travels in a DeviceInfo as one Any of this type; the
// coordinator concatenates the tasks' DeviceInfos in task order, so the answer holds one
// such Any per task.
inline constexpr char kOpaqueDevicesType[] = "type.googleapis.com/cohort.v1.OpaqueDevices";
tensorflow::DeviceInfo WrapDevices(const std::string& devices);
std::vector<std::string> UnwrapDevices(const tensorflow::DeviceInfo& cluster);

}  // namespace cohort
