#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "operator/api/coordinated_job.h"

namespace cohort::controller {

// Where a job with spec.coordinator.state.volume Auto keeps its coordinator's state, chosen
// once: a PersistentVolumeClaim when the cluster has a default StorageClass, else an
// emptyDir. The choice is kept in status.coordinatorStateVolume for the job's life.
struct StateVolumeChoice {
  api::StateVolume volume = api::StateVolume::kEmptyDir;
  // Made now (not read from the status): `message` is then the event that says why.
  bool fresh = false;
  bool warning = false;  // an emptyDir for want of a default StorageClass
  std::string message;
};

// `job`: one whose volume is Auto. `storage_classes`: the cluster's StorageClass list (only
// read when the status holds no choice yet); PERMISSION_DENIED chooses an emptyDir and says
// why; any other error is returned (the reconcile is tried again).
absl::StatusOr<StateVolumeChoice> ChooseStateVolume(
    const api::CoordinatedJob& job, const absl::StatusOr<nlohmann::json>& storage_classes);

}  // namespace cohort::controller
