// spec.gangScheduling of a CoordinatedJob (coordinated_job.h).
#include "absl/strings/str_cat.h"
#include "operator/api/coordinated_job.h"

namespace cohort::api {
namespace {

absl::Status InvalidGang(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("spec.gangScheduling", field, ": ", why));
}

}  // namespace

std::string PodGroupKindName(PodGroupKind kind) {
  switch (kind) {
    case PodGroupKind::kVolcano:
      return "Volcano";
    case PodGroupKind::kKubernetes:
      return "Kubernetes";
    case PodGroupKind::kSchedulerPlugins:
      break;
  }
  return "SchedulerPlugins";
}

absl::Status ParseGangScheduling(const json& gang, GangSchedulingSpec* out) {
  if (!gang.is_object()) return InvalidGang("", "must be an object");
  const json& kind = gang.contains("podGroup") ? gang["podGroup"] : json();
  if (kind == "SchedulerPlugins") {
    out->pod_group = PodGroupKind::kSchedulerPlugins;
  } else if (kind == "Volcano") {
    out->pod_group = PodGroupKind::kVolcano;
  } else if (kind == "Kubernetes") {
    out->pod_group = PodGroupKind::kKubernetes;
  } else {
    return InvalidGang(
        ".podGroup", absl::StrCat(kind.dump(), " is not SchedulerPlugins, Volcano or Kubernetes"));
  }
  if (gang.contains("schedulerName")) {
    if (!gang["schedulerName"].is_string() || gang["schedulerName"].get<std::string>().empty()) {
      return InvalidGang(".schedulerName", "must be a scheduler's name");
    }
    out->scheduler_name = gang["schedulerName"].get<std::string>();
  }
  if (gang.contains("scheduleTimeoutSeconds")) {
    const json& t = gang["scheduleTimeoutSeconds"];
    if (out->pod_group != PodGroupKind::kSchedulerPlugins) {
      return InvalidGang(".scheduleTimeoutSeconds", "is for podGroup SchedulerPlugins");
    }
    if (!t.is_number_integer() || t.get<int64_t>() < 1 || t.get<int64_t>() > 86400) {
      return InvalidGang(".scheduleTimeoutSeconds", "must be a whole number from 1 to 86400");
    }
    out->schedule_timeout_seconds = t.get<int>();
  }
  if (gang.contains("queue")) {
    if (out->pod_group != PodGroupKind::kVolcano)
      return InvalidGang(".queue", "is for podGroup Volcano");
    if (!gang["queue"].is_string()) return InvalidGang(".queue", "must be a Volcano queue's name");
    out->queue = gang["queue"].get<std::string>();
  }
  return absl::OkStatus();
}

}  // namespace cohort::api
