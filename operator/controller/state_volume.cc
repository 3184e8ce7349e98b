#include "operator/controller/state_volume.h"

#include "absl/strings/str_cat.h"
#include "operator/controller/children.h"

namespace cohort::controller {
namespace {

bool IsDefaultClass(const nlohmann::json& storage_class) {
  const nlohmann::json annotations =
      storage_class.value(nlohmann::json::json_pointer("/metadata/annotations"),
                          nlohmann::json::object());
  for (const char* key : {"storageclass.kubernetes.io/is-default-class",
                          "storageclass.beta.kubernetes.io/is-default-class"}) {
    if (annotations.value(key, "") == "true") return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<StateVolumeChoice> ChooseStateVolume(
    const api::CoordinatedJob& job, const absl::StatusOr<nlohmann::json>& storage_classes) {
  StateVolumeChoice choice;
  if (!job.status.state_volume.empty()) {
    if (auto kept = api::ParseStateVolumeName(job.status.state_volume)) {
      choice.volume = *kept;
      return choice;
    }
    // Not a choice this operator writes: made again below.
  }
  choice.fresh = true;
  const std::string size = job.spec.coordinator.state.size;
  const std::string why_not =
      " Name a class in spec.coordinator.state.storageClassName to keep the state on a claim, "
      "or set spec.coordinator.state.volume to EmptyDir to choose this.";
  if (!storage_classes.ok()) {
    if (storage_classes.status().code() != absl::StatusCode::kPermissionDenied) {
      return absl::Status(storage_classes.status().code(),
                          absl::StrCat("cannot list StorageClasses to choose where the "
                                       "coordinator's state goes (volume Auto): ",
                                       storage_classes.status().message()));
    }
    choice.warning = true;
    choice.message = absl::StrCat(
        "the coordinator's state goes on an emptyDir (", size,
        "), which outlives the coordinator's process but not its pod: the operator may not "
        "list StorageClasses (",
        storage_classes.status().message(),
        "), so it cannot tell whether the cluster has a default one.", why_not);
    return choice;
  }
  // The newest default class, as the API server picks when there are several.
  const nlohmann::json* chosen = nullptr;
  for (const nlohmann::json& c : storage_classes->value("items", nlohmann::json::array())) {
    if (!IsDefaultClass(c)) continue;
    const std::string created =
        c.value(nlohmann::json::json_pointer("/metadata/creationTimestamp"), "");
    if (!chosen || created > chosen->value(nlohmann::json::json_pointer("/metadata/creationTimestamp"), "")) {
      chosen = &c;
    }
  }
  if (!chosen) {
    choice.warning = true;
    choice.message = absl::StrCat(
        "the coordinator's state goes on an emptyDir (", size,
        "), which outlives the coordinator's process but not its pod: the cluster has no "
        "default StorageClass.",
        why_not);
    return choice;
  }
  choice.volume = api::StateVolume::kPersistentVolumeClaim;
  choice.message = absl::StrCat(
      "the coordinator's state goes on PersistentVolumeClaim ", CoordinatorStateClaimName(job),
      " (", size, ", StorageClass ",
      chosen->value(nlohmann::json::json_pointer("/metadata/name"), ""),
      ", the cluster's default), which outlives the coordinator's pod (spec.coordinator.state."
      "volume Auto)");
  return choice;
}

}  // namespace cohort::controller
