#include "operator/plan/state_volume.h"

#include "absl/strings/str_cat.h"

namespace cohort::controller {
namespace {

// Read defensively: a listed object may lack any of these, or hold null.
std::string ClassField(const nlohmann::json& object, const char* pointer) {
  const nlohmann::json::json_pointer p(pointer);
  if (!object.is_object() || !object.contains(p) || !object[p].is_string()) return "";
  return object[p].get<std::string>();
}

bool IsDefaultClass(const nlohmann::json& storage_class) {
  return ClassField(storage_class,
                    "/metadata/annotations/storageclass.kubernetes.io~1is-default-class") ==
             "true" ||
         ClassField(storage_class,
                    "/metadata/annotations/storageclass.beta.kubernetes.io~1is-default-class") ==
             "true";
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
  if (storage_classes->is_object() && storage_classes->contains("items") &&
      (*storage_classes)["items"].is_array()) {
    for (const nlohmann::json& c : (*storage_classes)["items"]) {
      if (!IsDefaultClass(c)) continue;
      if (!chosen || ClassField(c, "/metadata/creationTimestamp") >
                         ClassField(*chosen, "/metadata/creationTimestamp")) {
        chosen = &c;
      }
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
      " (", size, ", StorageClass ", ClassField(*chosen, "/metadata/name"),
      ", the cluster's default), which outlives the coordinator's pod (spec.coordinator.state."
      "volume Auto)");
  return choice;
}

}  // namespace cohort::controller
