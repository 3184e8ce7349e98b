// The coordinator's objects: its Pod, its Service and the claim that keeps its state.
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "operator/plan/children.h"
#include "operator/plan/children_internal.h"

namespace cohort::controller {

using internal::Labels;
using internal::Metadata;
using internal::TokenMount;
using internal::TokenVolume;

json CoordinatorService(const api::CoordinatedJob& job) {
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", Metadata(job, CoordinatorName(job), Labels(job, "coordinator"))},
          {"spec",
           {{"selector", {{kJobLabel, job.name}, {kRoleLabel, "coordinator"}}},
            {"ports", json::array({{{"name", "grpc"},
                                    {"port", kCoordinatorGrpcPort},
                                    {"targetPort", kCoordinatorGrpcPort}},
                                   {{"name", "http"},
                                    {"port", kCoordinatorHttpPort},
                                    {"targetPort", kCoordinatorHttpPort}}})}}}};
}

json CoordinatorStateClaim(const api::CoordinatedJob& job) {
  const auto& state = job.spec.coordinator.state;
  json spec = {{"accessModes", json::array({"ReadWriteOnce"})},
               {"resources", {{"requests", {{"storage", state.size}}}}}};
  if (!state.storage_class_name.empty()) spec["storageClassName"] = state.storage_class_name;
  return {{"apiVersion", "v1"},
          {"kind", "PersistentVolumeClaim"},
          {"metadata", Metadata(job, CoordinatorStateClaimName(job), Labels(job, "coordinator"))},
          {"spec", spec}};
}

json CoordinatorResources(const json& given) {
  json out = given.is_object() ? given : json::object();
  json requests = out.value("requests", json::object());
  json limits = out.value("limits", json::object());
  for (const auto& [name, fallback] :
       {std::pair{"cpu", kCoordinatorDefaultCpu}, std::pair{"memory", kCoordinatorDefaultMemory}}) {
    if (!requests.contains(name) && !limits.contains(name)) {
      requests[name] = limits[name] = fallback;
    }
  }
  for (const auto& [name, value] : requests.items()) {
    if (!limits.contains(name)) limits[name] = value;
  }
  for (const auto& [name, value] : limits.items()) {
    if (!requests.contains(name)) requests[name] = value;
  }
  out["requests"] = requests;
  out["limits"] = limits;
  return out;
}

std::string CoordinatorStateSubPath(absl::Time started, int restart) {
  return absl::StrCat(absl::FormatTime("%Y%m%dT%H%M%SZ", started, absl::UTCTimeZone()), "-gang-",
                      restart);
}

json CoordinatorPod(const api::CoordinatedJob& job, int restart, absl::Time started,
                    const OperatorSettings& settings, JobTls tls, const Placement& placement) {
  const auto& state = job.spec.coordinator.state;
  const bool keeps_state = state.volume != api::StateVolume::kNone;
  const json& own = job.spec.coordinator.pod_template;
  json labels = own.value(json::json_pointer("/metadata/labels"), json::object());
  const json ours = Labels(job, "coordinator");
  for (const auto& [k, v] : ours.items()) labels[k] = v;
  labels[kRestartLabel] = absl::StrCat(restart);
  json metadata = Metadata(job, CoordinatorName(job), labels);
  if (own.contains(json::json_pointer("/metadata/annotations"))) {
    metadata["annotations"] = own[json::json_pointer("/metadata/annotations")];
  }
  json mounts =
      json::array({{{"name", "config"}, {"mountPath", "/etc/cohort"}, {"readOnly", true}}});
  json volumes =
      json::array({{{"name", "config"}, {"configMap", {{"name", CoordinatorName(job)}}}}});
  if (keeps_state) {
    // A directory per gang and run: a gang restart or a resume starts from no state, even
    // on the same claim.
    mounts.push_back({{"name", "state"},
                      {"mountPath", kCoordinatorStateDir},
                      {"subPath", CoordinatorStateSubPath(started, restart)}});
    if (state.volume == api::StateVolume::kPersistentVolumeClaim) {
      // The whole claim too, where the coordinator removes the earlier gangs' directories
      // (--state-prune-before), which would otherwise fill it.
      mounts.push_back({{"name", "state"}, {"mountPath", kCoordinatorStateVolumeDir}});
      volumes.push_back(
          {{"name", "state"},
           {"persistentVolumeClaim", {{"claimName", CoordinatorStateClaimName(job)}}}});
    } else {
      volumes.push_back({{"name", "state"}, {"emptyDir", {{"sizeLimit", state.size}}}});
    }
  }
  json args = json::array({"--config", "/etc/cohort/coordinator.yaml"});
  if (state.volume == api::StateVolume::kPersistentVolumeClaim) {
    args.push_back("--state-prune-before");
    args.push_back(
        absl::StrCat(kCoordinatorStateVolumeDir, "/", CoordinatorStateSubPath(started, restart)));
  }
  mounts.push_back(TokenMount());  // the config's auth-token-file (and TLS files)
  volumes.push_back(TokenVolume(job, /*coordinator=*/true, tls));
  json container = {
      {"name", "coordinator"},
      {"image", job.spec.coordinator.image.empty() ? settings.coordinator_image
                                                   : job.spec.coordinator.image},
      {"args", args},
      {"ports", json::array({{{"name", "grpc"}, {"containerPort", kCoordinatorGrpcPort}},
                             {{"name", "http"}, {"containerPort", kCoordinatorHttpPort}}})},
      {"readinessProbe",
       {{"httpGet", {{"path", "/readyz"}, {"port", kCoordinatorHttpPort}}},
        {"periodSeconds", 1},
        {"failureThreshold", 3}}},
      {"livenessProbe",
       {{"httpGet", {{"path", "/healthz"}, {"port", kCoordinatorHttpPort}}},
        {"periodSeconds", 10},
        {"failureThreshold", 6}}},
      {"volumeMounts", mounts},
      {"resources", CoordinatorResources(job.spec.coordinator.resources)},
      {"securityContext",
       {{"allowPrivilegeEscalation", false},
        {"readOnlyRootFilesystem", true},
        {"runAsNonRoot", true},
        {"runAsUser", kCoordinatorUser},
        {"capabilities", {{"drop", json::array({"ALL"})}}},
        {"seccompProfile", {{"type", "RuntimeDefault"}}}}},
  };
  json spec = {
      // With its state on a volume a crashed coordinator restarts in place and keeps the gang;
      // without, a lost coordinator restarts the whole gang.
      {"restartPolicy", keeps_state ? "Always" : "Never"},
      {"terminationGracePeriodSeconds", 5},
      {"enableServiceLinks", false},
      {"containers", json::array({container})},
      {"volumes", volumes}};
  if (keeps_state) {
    spec["securityContext"] = {{"fsGroup", kCoordinatorUser},
                               {"fsGroupChangePolicy", "OnRootMismatch"}};
  }
  // It must fit where the workers fit (tainted nodes, a priority no lower than theirs).
  const json workers = job.spec.pod_template.value("spec", json::object());
  const json overrides = own.value("spec", json::object());
  for (const char* field : api::kCoordinatorSchedulingFields) {
    if (overrides.contains(field)) {
      spec[field] = overrides[field];
    } else if (workers.contains(field)) {
      spec[field] = workers[field];
    }
  }
  json pod = {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", metadata}, {"spec", spec}};
  StampSpecHash(SpecHash(job), &pod);
  Place(job, placement, &pod);
  return pod;
}

}  // namespace cohort::controller
