// Reading and checking a CoordinatedJob's spec; what its values mean (sizes, names, exit codes).
#include "operator/api/coordinated_job.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "operator/api/coordinated_job_internal.h"

namespace cohort::api {
namespace internal {

std::string Str(const json& o, const char* key, const std::string& fallback) {
  auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : fallback;
}

std::optional<int64_t> Whole(const json& o, const char* key, int64_t fallback, int64_t min,
                             int64_t max) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return fallback;
  int64_t v = 0;
  if (it->is_number_unsigned()) {
    if (it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return std::nullopt;
    }
    v = static_cast<int64_t>(it->get<uint64_t>());
  } else if (it->is_number_integer()) {
    v = it->get<int64_t>();
  } else {
    return std::nullopt;
  }
  if (v < min || v > max) return std::nullopt;
  return v;
}

}  // namespace internal

namespace {

using internal::Str;
using internal::Whole;

// The CRD says the same (charts/cohort/crds), so that the API server refuses it first.
constexpr char kHostNetworkRefused[] =
    "hostNetwork is not allowed: the workload's sidecar serves the job's coordinator, with the "
    "job's token attached, on the pod's loopback (127.0.0.1:8476), which on the node's network "
    "would be open to every process on the node";

absl::Status Invalid(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

// The API server checks the pods the operator creates, not the template inside a
// CoordinatedJob (the CRD keeps it as it is given). The fields the operator adds to must have
// the types it adds to, or the job is refused, naming the field.
absl::Status CheckTemplateShape(const json& tmpl, const std::string& field = "spec.template") {
  if (!tmpl.is_object()) return Invalid(field, "must be a pod template (an object)");
  const auto want = [](const json& parent, const char* key, bool list,
                       const std::string& path) -> absl::Status {
    if (!parent.contains(key)) return absl::OkStatus();
    const json& value = parent[key];
    if (list ? value.is_array() : value.is_object()) return absl::OkStatus();
    return Invalid(path + key, list ? "must be a list" : "must be an object");
  };
  for (auto [key, list] : {std::pair{"metadata", false}, std::pair{"spec", false}}) {
    if (auto s = want(tmpl, key, list, field + "."); !s.ok()) return s;
  }
  const json metadata = tmpl.value("metadata", json::object());
  for (const char* key : {"labels", "annotations"}) {
    if (auto s = want(metadata, key, false, field + ".metadata."); !s.ok()) return s;
  }
  const json spec = tmpl.value("spec", json::object());
  for (const char* key : {"containers", "initContainers", "volumes"}) {
    if (auto s = want(spec, key, true, field + ".spec."); !s.ok()) return s;
  }
  for (const char* list : {"containers", "initContainers"}) {
    const json containers = spec.value(list, json::array());
    for (size_t i = 0; i < containers.size(); ++i) {
      const std::string path = absl::StrCat(field, ".spec.", list, "[", i, "]");
      if (!containers[i].is_object()) return Invalid(path, "must be a container (an object)");
      for (const char* key : {"env", "volumeMounts"}) {
        if (auto s = want(containers[i], key, true, path + "."); !s.ok()) return s;
      }
    }
  }
  return absl::OkStatus();
}

// A DNS-1035 label short enough that "<name>-worker-16383" still is a valid hostname.
constexpr size_t kMaxNameLength = 42;

absl::Status CheckName(const std::string& name) {
  if (name.empty()) return Invalid("metadata.name", "missing");
  if (name.size() > kMaxNameLength) {
    return Invalid("metadata.name",
                   absl::StrCat("\"", name, "\" is longer than ", kMaxNameLength,
                                " characters, too long for the pod and service names derived "
                                "from it"));
  }
  if (!absl::ascii_islower(name[0])) {
    return Invalid("metadata.name", absl::StrCat("\"", name,
                                                 "\" must start with a lower-case letter (it "
                                                 "names services, which are DNS-1035 labels)"));
  }
  for (char c : name) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '-') {
      return Invalid("metadata.name",
                     absl::StrCat("\"", name, "\" may hold only a-z, 0-9 and '-'"));
    }
  }
  if (name.back() == '-') return Invalid("metadata.name", "must not end with '-'");
  return absl::OkStatus();
}

// A resource quantity such as 1Gi, 500M or 2.5Gi (the forms a volume size takes).
bool IsQuantity(const std::string& text) {
  static const char* kSuffixes[] = {"",   "k",  "M",  "G",  "T",  "P", "E",
                                    "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
  size_t i = 0;
  while (i < text.size() && (absl::ascii_isdigit(text[i]) || text[i] == '.')) ++i;
  const std::string number = text.substr(0, i), suffix = text.substr(i);
  if (number.empty() || number.front() == '.' || number.back() == '.' ||
      std::count(number.begin(), number.end(), '.') > 1 ||
      number.find_first_not_of("0.") == std::string::npos) {
    return false;  // not a positive decimal number
  }
  return std::find_if(std::begin(kSuffixes), std::end(kSuffixes),
                      [&](const char* s) { return suffix == s; }) != std::end(kSuffixes);
}

absl::Status CheckStringMap(const json& o, const std::string& field) {
  if (!o.is_object()) return Invalid(field, "must be a map of strings");
  for (const auto& [k, v] : o.items()) {
    if (!v.is_string()) return Invalid(absl::StrCat(field, ".", k), "must be a string");
  }
  return absl::OkStatus();
}

absl::Status ParseResources(const json& resources, const std::string& field) {
  if (!resources.is_object()) return Invalid(field, "must be an object");
  for (const auto& [k, v] : resources.items()) {
    if (k != "requests" && k != "limits" && k != "claims") {
      return Invalid(absl::StrCat(field, ".", k), "is not requests, limits or claims");
    }
    if (k != "claims" && !v.is_object()) {
      return Invalid(absl::StrCat(field, ".", k), "must be a map such as {cpu: 500m}");
    }
  }
  return absl::OkStatus();
}

absl::Status ParsePodTemplate(const json& tmpl, json* out) {
  const std::string field = "spec.coordinator.podTemplate";
  if (!tmpl.is_object()) return Invalid(field, "must be an object");
  for (const auto& [k, v] : tmpl.items()) {
    if (k != "metadata" && k != "spec") {
      return Invalid(absl::StrCat(field, ".", k), "only metadata and spec can be set");
    }
    if (!v.is_object()) return Invalid(absl::StrCat(field, ".", k), "must be an object");
  }
  const json metadata = tmpl.value("metadata", json::object());
  for (const auto& [k, v] : metadata.items()) {
    const std::string name = absl::StrCat(field, ".metadata.", k);
    if (k != "labels" && k != "annotations") {
      return Invalid(name, "only labels and annotations can be set");
    }
    if (auto s = CheckStringMap(v, name); !s.ok()) return s;
  }
  const json spec = tmpl.value("spec", json::object());
  for (const auto& [k, v] : spec.items()) {
    const auto& fields = kCoordinatorSchedulingFields;
    if (std::find(std::begin(fields), std::end(fields), k) == std::end(fields)) {
      return Invalid(absl::StrCat(field, ".spec.", k),
                     "the coordinator's pod takes only nodeSelector, tolerations, affinity, "
                     "priorityClassName, imagePullSecrets and schedulerName");
    }
  }
  *out = tmpl;
  return absl::OkStatus();
}

absl::Status ParseState(const json& state, CoordinatorStateSpec* out) {
  const std::string field = "spec.coordinator.state";
  if (!state.is_object()) return Invalid(field, "must be an object");
  const std::string volume = Str(state, "volume", "Auto");
  if (volume == "Auto") {
    // A storage class named is a claim; otherwise the operator decides (volume_auto).
    out->volume_auto = !state.contains("storageClassName");
    out->volume = out->volume_auto ? StateVolume::kEmptyDir : StateVolume::kPersistentVolumeClaim;
  } else if (auto named = ParseStateVolumeName(volume)) {
    out->volume_auto = false;
    out->volume = *named;
  } else {
    return Invalid(
        absl::StrCat(field, ".volume"),
        absl::StrCat("\"", volume, "\" is not Auto, EmptyDir, PersistentVolumeClaim or None"));
  }
  if (state.contains("storageClassName")) {
    if (!state["storageClassName"].is_string()) {
      return Invalid(absl::StrCat(field, ".storageClassName"), "must be a string");
    }
    if (out->volume != StateVolume::kPersistentVolumeClaim) {
      return Invalid(
          absl::StrCat(field, ".storageClassName"),
          absl::StrCat("applies only to volume PersistentVolumeClaim or Auto, not ", volume));
    }
    out->storage_class_name = state["storageClassName"].get<std::string>();
  }
  if (state.contains("size")) {
    const std::string size = Str(state, "size");
    if (!IsQuantity(size)) {
      return Invalid(absl::StrCat(field, ".size"),
                     absl::StrCat(state["size"].dump(), " is not a size such as 1Gi or 500Mi"));
    }
    if (out->volume == StateVolume::kNone) {
      return Invalid(absl::StrCat(field, ".size"), "volume None keeps no state to size");
    }
    out->size = size;
  }
  return absl::OkStatus();
}

// A pod template whose containers the operator adds a sidecar to.
absl::Status CheckWorkloadTemplate(const json& tmpl, const std::string& field) {
  if (auto shape = CheckTemplateShape(tmpl, field); !shape.ok()) return shape;
  const json containers = tmpl.value("/spec/containers"_json_pointer, json::array());
  const std::string path = field + ".spec.containers";
  if (!containers.is_array() || containers.empty()) {
    return Invalid(path, "the workload needs at least one container");
  }
  for (const auto& c : containers) {
    if (Str(c, "name").empty()) return Invalid(path, "every container needs a name");
    if (Str(c, "name") == "cohort-sidecar") {
      return Invalid(path, "\"cohort-sidecar\" is the name of the container the operator injects");
    }
  }
  const json host_network = tmpl.value("/spec/hostNetwork"_json_pointer, json());
  if (host_network.is_boolean() && host_network.get<bool>()) {
    return Invalid(field + ".spec.hostNetwork", kHostNetworkRefused);
  }
  return absl::OkStatus();
}

absl::Status ParseTasks(const json& tasks, TaskRuntimeSpec* t) {
  if (!tasks.is_object()) return Invalid("spec.tasks", "must be an object");
  const auto workers = Whole(tasks, "workersPerPod", 1, 1, 256);
  if (!workers) return Invalid("spec.tasks.workersPerPod", "must be a whole number from 1 to 256");
  t->workers_per_pod = static_cast<int>(*workers);
  t->object_store_memory = Str(tasks, "objectStoreMemory");
  if (!t->object_store_memory.empty()) {
    std::optional<uint64_t> bytes = QuantityBytes(t->object_store_memory);
    if (!bytes) {
      return Invalid("spec.tasks.objectStoreMemory",
                     absl::StrCat("\"", t->object_store_memory, "\" is not a size such as 2Gi"));
    }
    if (*bytes < (uint64_t{16} << 20)) {
      return Invalid("spec.tasks.objectStoreMemory", "must be at least 16Mi");
    }
  }
  const auto retries = Whole(tasks, "taskRetries", 3, 0, 100);
  if (!retries) return Invalid("spec.tasks.taskRetries", "must be a whole number from 0 to 100");
  t->task_retries = static_cast<int>(*retries);
  t->task_liveness_timeout = Str(tasks, "taskLivenessTimeout", "5s");
  absl::Duration liveness;
  if (!absl::ParseDuration(t->task_liveness_timeout, &liveness) ||
      liveness <= absl::ZeroDuration()) {
    return Invalid(
        "spec.tasks.taskLivenessTimeout",
        absl::StrCat("\"", t->task_liveness_timeout, "\" is not a positive duration such as 5s"));
  }
  const json driver = tasks.value("driver", json());
  if (!driver.is_object() || !driver.contains("template")) {
    return Invalid("spec.tasks.driver.template", "the task runtime needs a driver's pod template");
  }
  t->driver_template = driver["template"];
  return CheckWorkloadTemplate(t->driver_template, "spec.tasks.driver.template");
}

absl::Status ParseCoordinator(const json& coordinator, CoordinatorSpec* c) {
  if (!coordinator.is_object()) return Invalid("spec.coordinator", "must be an object");
  c->image = Str(coordinator, "image");
  c->resources = coordinator.value("resources", json::object());
  if (auto s = ParseResources(c->resources, "spec.coordinator.resources"); !s.ok()) return s;
  const CoordinatorSpec defaults;  // each default written once, in coordinated_job.h
  c->heartbeat_timeout = Str(coordinator, "heartbeatTimeout", defaults.heartbeat_timeout);
  c->register_timeout = Str(coordinator, "registerTimeout", defaults.register_timeout);
  c->shutdown_barrier_timeout =
      Str(coordinator, "shutdownBarrierTimeout", defaults.shutdown_barrier_timeout);
  c->outage_tolerance = Str(coordinator, "outageTolerance", defaults.outage_tolerance);
  for (const auto& [field, value] :
       {std::pair{"heartbeatTimeout", &c->heartbeat_timeout},
        std::pair{"registerTimeout", &c->register_timeout},
        std::pair{"shutdownBarrierTimeout", &c->shutdown_barrier_timeout},
        std::pair{"outageTolerance", &c->outage_tolerance}}) {
    absl::Duration d;
    if (!absl::ParseDuration(*value, &d) || d < absl::ZeroDuration()) {
      return Invalid(absl::StrCat("spec.coordinator.", field),
                     absl::StrCat("\"", *value, "\" is not a duration such as 30s or 2m"));
    }
  }
  if (coordinator.contains("podTemplate")) {
    if (auto s = ParsePodTemplate(coordinator["podTemplate"], &c->pod_template); !s.ok()) return s;
  }
  if (coordinator.contains("state")) {
    if (auto s = ParseState(coordinator["state"], &c->state); !s.ok()) return s;
  }
  if (auto it = coordinator.find("recoverable"); it != coordinator.end() && !it->is_null()) {
    if (!it->is_boolean()) return Invalid("spec.coordinator.recoverable", "must be true or false");
    c->recoverable = it->get<bool>();
  }
  return absl::OkStatus();
}

// spec.sidecar: its image and resources, and what its GPU health check ignores and exports.
absl::Status ParseSidecar(const json& sidecar, SidecarSpec* out) {
  out->image = Str(sidecar, "image");
  out->resources = sidecar.value("resources", json::object());
  const json health = sidecar.value("gpuHealth", json::object());
  if (health.contains("ignoredXids") && health["ignoredXids"].is_array()) {
    std::vector<int> xids;
    for (const auto& x : health["ignoredXids"]) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 ||
          x.get<int64_t>() > std::numeric_limits<int>::max()) {
        return Invalid("spec.sidecar.gpuHealth.ignoredXids", "XIDs are whole numbers");
      }
      xids.push_back(static_cast<int>(x.get<int64_t>()));
    }
    out->ignored_xids = xids;
  }
  out->dcgm_metrics = health.value("dcgmMetrics", false);
  const json& dumps = sidecar.contains("stackDumps") ? sidecar["stackDumps"] : json(false);
  if (!dumps.is_boolean() && !dumps.is_null()) {
    return Invalid("spec.sidecar.stackDumps", "must be true or false");
  }
  out->stack_dumps = dumps.is_boolean() && dumps.get<bool>();
  return absl::OkStatus();
}

// successPolicy, activeDeadlineSeconds, ttlSecondsAfterFinished and suspend.
absl::Status ParseLifecycle(const json& spec, JobSpec* s) {
  const std::string success = Str(spec, "successPolicy", "AllWorkers");
  if (success == "AllWorkers") {
    s->success_policy = SuccessPolicy::kAllWorkers;
  } else if (success == "Worker0") {
    s->success_policy = SuccessPolicy::kWorker0;
  } else {
    return Invalid("spec.successPolicy",
                   absl::StrCat("\"", success, "\" is not AllWorkers or Worker0"));
  }
  if (spec.contains("activeDeadlineSeconds") && !spec["activeDeadlineSeconds"].is_null()) {
    const auto seconds = Whole(spec, "activeDeadlineSeconds", 0, 1);
    if (!seconds) return Invalid("spec.activeDeadlineSeconds", "must be a whole number above 0");
    s->active_deadline_seconds = *seconds;
  }
  if (spec.contains("ttlSecondsAfterFinished") && !spec["ttlSecondsAfterFinished"].is_null()) {
    const auto seconds =
        Whole(spec, "ttlSecondsAfterFinished", 0, 0, std::numeric_limits<int>::max());
    if (!seconds) return Invalid("spec.ttlSecondsAfterFinished", "must be a whole number");
    s->ttl_seconds_after_finished = static_cast<int>(*seconds);
  }
  s->suspend = spec.value("suspend", false);
  return absl::OkStatus();
}

}  // namespace

std::optional<uint64_t> QuantityBytes(const std::string& text) {
  if (!IsQuantity(text)) return std::nullopt;
  size_t i = 0;
  while (i < text.size() && (absl::ascii_isdigit(text[i]) || text[i] == '.')) ++i;
  double number = 0;
  if (!absl::SimpleAtod(text.substr(0, i), &number)) return std::nullopt;
  static const std::pair<const char*, double> kScale[] = {
      {"", 1},        {"k", 1e3},     {"M", 1e6},     {"G", 1e9},     {"T", 1e12},
      {"P", 1e15},    {"E", 1e18},    {"Ki", 1024.0}, {"Mi", 0x1p20}, {"Gi", 0x1p30},
      {"Ti", 0x1p40}, {"Pi", 0x1p50}, {"Ei", 0x1p60}};
  for (const auto& [suffix, scale] : kScale) {
    if (text.substr(i) != suffix) continue;
    const double bytes = number * scale;
    if (bytes >= 0x1p63) return std::nullopt;
    return static_cast<uint64_t>(bytes);
  }
  return std::nullopt;
}

uint64_t ObjectStoreBytes(const TaskRuntimeSpec& tasks, const json& pod_template) {
  if (auto bytes = QuantityBytes(tasks.object_store_memory)) return *bytes;
  constexpr uint64_t kMin = uint64_t{64} << 20;
  const json resources =
      pod_template.value("/spec/containers/0/resources"_json_pointer, json::object());
  for (const char* kind : {"limits", "requests"}) {
    const json memory = resources.value(kind, json::object()).value("memory", json());
    if (!memory.is_string()) continue;
    if (auto bytes = QuantityBytes(memory.get<std::string>())) {
      return std::max(kMin, *bytes / 10 * 3);
    }
  }
  return uint64_t{1} << 30;
}

std::string FrameworkName(Framework f) {
  switch (f) {
    case Framework::kJax:
      return "jax";
    case Framework::kTensorflow:
      return "tensorflow";
    case Framework::kPytorch:
      return "pytorch";
    case Framework::kGeneric:
      break;
  }
  return "generic";
}

std::string StateVolumeName(StateVolume v) {
  switch (v) {
    case StateVolume::kPersistentVolumeClaim:
      return "PersistentVolumeClaim";
    case StateVolume::kNone:
      return "None";
    case StateVolume::kEmptyDir:
      break;
  }
  return "EmptyDir";
}

std::optional<StateVolume> ParseStateVolumeName(const std::string& name) {
  for (StateVolume v :
       {StateVolume::kEmptyDir, StateVolume::kPersistentVolumeClaim, StateVolume::kNone}) {
    if (name == StateVolumeName(v)) return v;
  }
  return std::nullopt;
}

std::string WorkloadJobName(Framework f) { return f == Framework::kJax ? "jax_worker" : "worker"; }

bool IsRetryableExitCode(const FailurePolicy& policy, int exit_code) {
  const auto has = [](const std::vector<int>& v, int c) {
    return std::find(v.begin(), v.end(), c) != v.end();
  };
  if (has(policy.permanent_exit_codes, exit_code)) return false;
  if (has(policy.retryable_exit_codes, exit_code)) return true;
  return exit_code >= 128 || exit_code < 0;  // < 0: no exit code (pod lost, evicted)
}

namespace {
absl::StatusOr<CoordinatedJob> ParseCoordinatedJobOrThrow(const json& object);
}  // namespace

// The API server checks a CoordinatedJob against the CRD's schema, but nothing here relies
// on that: a field of an unexpected type is a clear error, never an exception.
absl::StatusOr<CoordinatedJob> ParseCoordinatedJob(const json& object) {
  try {
    return ParseCoordinatedJobOrThrow(object);
  } catch (const json::exception& e) {
    return Invalid("object", std::string("a field has an unexpected type: ") + e.what());
  }
}

namespace {
absl::StatusOr<CoordinatedJob> ParseCoordinatedJobOrThrow(const json& object) {
  if (!object.is_object()) return Invalid("object", "not a JSON object");
  CoordinatedJob job;
  job.object = object;
  const json metadata = object.value("metadata", json::object());
  job.name = Str(metadata, "name");
  job.namespace_name = Str(metadata, "namespace");
  job.uid = Str(metadata, "uid");
  job.generation = Whole(metadata, "generation", 0, 0).value_or(0);
  job.resource_version = Str(metadata, "resourceVersion");
  if (auto s = CheckName(job.name); !s.ok()) return s;

  const json spec = object.value("spec", json::object());
  if (!spec.is_object()) return Invalid("spec", "missing");
  JobSpec& s = job.spec;
  auto replicas = spec.find("replicas");
  if (replicas == spec.end() || !replicas->is_number_integer() || replicas->get<int64_t>() < 1 ||
      replicas->get<int64_t>() > 16384) {
    return Invalid("spec.replicas", "must be a whole number from 1 to 16384");
  }
  s.replicas = replicas->get<int>();

  const std::string framework = Str(spec, "framework", "generic");
  if (framework == "jax") {
    s.framework = Framework::kJax;
  } else if (framework == "tensorflow") {
    s.framework = Framework::kTensorflow;
  } else if (framework == "pytorch") {
    s.framework = Framework::kPytorch;
  } else if (framework == "generic") {
    s.framework = Framework::kGeneric;
  } else {
    return Invalid("spec.framework",
                   absl::StrCat("\"", framework, "\" is not jax, tensorflow, pytorch or generic"));
  }
  if (auto p = internal::ParsePytorch(spec, &s); !p.ok()) return p;

  s.pod_template = spec.value("template", json::object());
  if (auto t = CheckWorkloadTemplate(s.pod_template, "spec.template"); !t.ok()) return t;

  if (auto c = ParseCoordinator(spec.value("coordinator", json::object()), &s.coordinator);
      !c.ok()) {
    return c;
  }

  if (auto sc = ParseSidecar(spec.value("sidecar", json::object()), &s.sidecar); !sc.ok()) {
    return sc;
  }
  if (auto f = internal::ParseFailurePolicy(spec, &s); !f.ok()) return f;
  if (auto e = internal::ParseElastic(spec, &s); !e.ok()) return e;
  if (auto l = ParseLifecycle(spec, &s); !l.ok()) return l;
  if (spec.contains("tasks") && !spec["tasks"].is_null()) {
    if (s.framework != Framework::kGeneric) {
      return Invalid("spec.framework", "must be generic when spec.tasks runs the task runtime");
    }
    TaskRuntimeSpec tasks;
    if (auto t = ParseTasks(spec["tasks"], &tasks); !t.ok()) return t;
    s.tasks = std::move(tasks);
  }
  if (spec.contains("gangScheduling") && !spec["gangScheduling"].is_null()) {
    GangSchedulingSpec gang;
    if (auto g = ParseGangScheduling(spec["gangScheduling"], &gang); !g.ok()) return g;
    s.gang_scheduling = std::move(gang);
  }

  job.status = internal::ParseJobStatus(object.value("status", json::object()), s.replicas);
  return job;
}
}  // namespace

}  // namespace cohort::api
