#include "operator/plan/kueue.h"

#include <openssl/evp.h>

#include <algorithm>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "operator/plan/json_fields.h"

namespace cohort::controller::kueue {
namespace {

// The planner's tolerant readers: a field of the wrong type reads as absent.
const json& Get(const json& object, const char* key) { return planning::Field(object, key); }
std::string Str(const json& v) { return planning::Text(v); }
const json& Array(const json& v) { return planning::Items(v); }

std::string Label(const json& object, const char* key) {
  return Str(Get(Get(Get(object, "metadata"), "labels"), key));
}

// The part of a pod a Workload's pod set keeps as its template.
json TemplateOf(const json& pod) {
  json metadata = json::object();
  const json& m = Get(pod, "metadata");
  if (Get(m, "labels").is_object()) metadata["labels"] = m["labels"];
  if (Get(m, "annotations").is_object()) metadata["annotations"] = m["annotations"];
  return {{"metadata", metadata}, {"spec", Get(pod, "spec")}};
}

// A pod set's topologyRequest from its pods' annotations, as Kueue builds it for its own
// integrations (one of required, preferred or unconstrained; a slice layer; a group name with
// required or preferred); none without any of them unless the pods have an index label.
std::optional<json> TopologyRequest(const json& pod, const std::string& index_label) {
  const json& annotations = Get(Get(pod, "metadata"), "annotations");
  const auto annotation = [&annotations](const char* key) -> std::optional<std::string> {
    const json& v = Get(annotations, key);
    if (!v.is_string()) return std::nullopt;
    return v.get<std::string>();
  };
  json request = json::object();
  const auto required = annotation("kueue.x-k8s.io/podset-required-topology");
  const auto preferred = annotation("kueue.x-k8s.io/podset-preferred-topology");
  const auto unconstrained = annotation("kueue.x-k8s.io/podset-unconstrained-topology");
  const auto slice = annotation("kueue.x-k8s.io/podset-slice-required-topology");
  const auto slice_size = annotation("kueue.x-k8s.io/podset-slice-size");
  int slice_pods = 0;
  const bool sliced =
      slice && slice_size && absl::SimpleAtoi(*slice_size, &slice_pods) && slice_pods > 0;
  if (required) {
    request["required"] = *required;
  } else if (preferred) {
    request["preferred"] = *preferred;
  } else if (unconstrained) {
    request["unconstrained"] = *unconstrained == "true";
  } else if (!sliced && index_label.empty()) {
    return std::nullopt;
  }
  if (sliced) {
    request["podSetSliceRequiredTopology"] = *slice;
    request["podSetSliceSize"] = slice_pods;
  }
  if (!index_label.empty()) request["podIndexLabel"] = index_label;
  if (const auto group = annotation("kueue.x-k8s.io/podset-group-name");
      group && (required || preferred)) {
    request["podSetGroupName"] = *group;
  }
  return request;
}

json PodSet(const api::CoordinatedJob& job, const char* name, int count, json pod,
            const std::string& index_label = "") {
  JoinPodGroup(job, &pod);
  json set = {{"name", name}, {"count", count}, {"template", TemplateOf(pod)}};
  if (auto topology = TopologyRequest(pod, index_label)) set["topologyRequest"] = *topology;
  return set;
}

// The containers of a template as quota sees them: names and resources, in order.
json QuotaShape(const json& pod_set) {
  json shape = json::array();
  const json& spec = Get(Get(pod_set, "template"), "spec");
  for (const char* list : {"initContainers", "containers"}) {
    for (const json& c : Array(Get(spec, list))) {
      json resources = Get(c, "resources");
      shape.push_back(
          {list, Str(Get(c, "name")), resources.is_null() ? json::object() : resources});
    }
  }
  return shape;
}

// Adds key=value to `into`, or says why it cannot (another value is there already).
std::string Merge(std::map<std::string, std::string>* into, const std::string& key,
                  const std::string& value, const std::string& what) {
  auto [it, added] = into->emplace(key, value);
  if (!added && it->second != value) {
    return absl::StrCat(what, " ", key, " is both \"", it->second, "\" and \"", value, "\"");
  }
  return "";
}

std::string MergeMap(std::map<std::string, std::string>* into, const json& from,
                     const std::string& what) {
  if (!from.is_object()) return "";
  for (const auto& [k, v] : from.items()) {
    if (!v.is_string()) return absl::StrCat(what, " ", k, " is not a string");
    if (std::string e = Merge(into, k, v.get<std::string>(), what); !e.empty()) return e;
  }
  return "";
}

void AddTolerations(std::vector<json>* into, const json& from) {
  for (const json& t : Array(from)) {
    if (std::find(into->begin(), into->end(), t) == into->end()) into->push_back(t);
  }
}

// A key of the pod's string map at `field` (metadata.labels, spec.nodeSelector...) that `add`
// gives another value, or a field that is no map: what, or "".
std::string MapConflict(const json& object, const char* field,
                        const std::map<std::string, std::string>& add, const std::string& what) {
  const json& target = Get(object, field);
  if (add.empty() || target.is_null()) return "";
  if (!target.is_object()) return absl::StrCat(what, " is not a map");
  for (const auto& [k, v] : add) {
    auto it = target.find(k);
    if (it != target.end() && *it != v) {
      return absl::StrCat(what, " ", k, " is \"", Str(*it), "\" in the pod and \"", v,
                          "\" in the admission");
    }
  }
  return "";
}

void AddToMap(json* object, const char* field, const std::map<std::string, std::string>& add) {
  if (add.empty()) return;
  json& target = (*object)[field];
  if (!target.is_object()) target = json::object();
  for (const auto& [k, v] : add) target[k] = v;
}

// Adds what the pod's list at `field` lacks of `add`.
void AddToList(json* object, const char* field, const std::vector<json>& add) {
  if (add.empty()) return;
  json& list = (*object)[field];
  if (!list.is_array()) list = json::array();
  for (const json& item : add) {
    if (std::find(list.begin(), list.end(), item) == list.end()) list.push_back(item);
  }
}

}  // namespace

std::string QueueName(const api::CoordinatedJob& job) { return Label(job.object, kQueueNameLabel); }

std::string WorkloadName(const api::CoordinatedJob& job) {
  const std::string input =
      absl::StrCat(api::kKind, "\n", api::kGroup, "\n", job.name, "\n", job.uid);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(input.data(), input.size(), digest, &size, EVP_sha1(), nullptr);
  const std::string hex =
      absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), size));
  // Kind in lower case, the job's name (at most 247 characters: a name is at most 253), the
  // hash's first five hex digits.
  return absl::StrCat("coordinatedjob-", job.name.substr(0, 247 - 15), "-", hex.substr(0, 5));
}

std::string PodSetOf(const json& pod) {
  const std::string role = Label(pod, kRoleLabel);
  if (role == "coordinator") return kCoordinatorPodSet;
  if (role == "worker") return kWorkersPodSet;
  if (role == "driver") return kDriverPodSet;
  return "";
}

PriorityClassSource PrioritySourceOf(const api::CoordinatedJob& job) {
  const std::string label = Label(job.object, kPriorityClassLabel);
  if (!label.empty()) return {PriorityClassSource::kWorkloadPriorityClass, label};
  const std::string pods = Str(Get(Get(job.spec.pod_template, "spec"), "priorityClassName"));
  if (!pods.empty()) return {PriorityClassSource::kPriorityClass, pods};
  return {PriorityClassSource::kGlobalDefault, ""};
}

KueueObserved::Priority PriorityFrom(const PriorityClassSource& source,
                                     const std::optional<json>& found) {
  KueueObserved::Priority out;
  if (source.kind == PriorityClassSource::kNone) return out;
  if (!found) {
    if (source.kind == PriorityClassSource::kGlobalDefault) return out;  // none: priority 0
    out.error = source.kind == PriorityClassSource::kWorkloadPriorityClass
                    ? absl::StrCat("WorkloadPriorityClass ", source.name, " (label ",
                                   kPriorityClassLabel, ") does not exist")
                    : absl::StrCat("PriorityClass ", source.name,
                                   " (the pods' priorityClassName) does not exist");
    return out;
  }
  const bool workload_class = source.kind == PriorityClassSource::kWorkloadPriorityClass;
  const json& value = Get(*found, "value");
  out.value = value.is_number_integer() ? value.get<int32_t>() : 0;
  out.ref = json{{"group", workload_class ? "kueue.x-k8s.io" : "scheduling.k8s.io"},
                 {"kind", workload_class ? "WorkloadPriorityClass" : "PriorityClass"},
                 {"name", Str(Get(Get(*found, "metadata"), "name"))}};
  return out;
}

json DesiredWorkload(const api::CoordinatedJob& job, const OperatorSettings& settings,
                     const KueueObserved::Priority* priority) {
  json pod_sets = json::array();
  pod_sets.push_back(PodSet(job, kCoordinatorPodSet, 1,
                            CoordinatorPod(job, 0, absl::UnixEpoch(), settings, JobTls::kNone)));
  pod_sets.push_back(PodSet(job, kWorkersPodSet, job.spec.replicas,
                            WorkerPod(job, 0, 0, settings, JobTls::kNone), kIndexLabel));
  if (job.spec.tasks) {
    pod_sets.push_back(PodSet(job, kDriverPodSet, 1, DriverPod(job, 0, settings, JobTls::kNone)));
  }
  json workload = {
      {"apiVersion", kApiVersion},
      {"kind", "Workload"},
      {"metadata",
       {{"name", WorkloadName(job)},
        {"namespace", job.namespace_name},
        {"labels", {{kManagedByLabel, kManagedBy}, {kJobLabel, job.name}, {kJobUidLabel, job.uid}}},
        {"ownerReferences", json::array({OwnerReference(job)})},
        {"finalizers", json::array({kResourceInUseFinalizer})}}},
      {"spec", {{"queueName", QueueName(job)}, {"podSets", pod_sets}}}};
  if (priority && priority->error.empty()) {
    if (priority->ref) workload["spec"]["priorityClassRef"] = *priority->ref;
    workload["spec"]["priority"] = priority->value;
  }
  int seconds = 0;
  if (absl::SimpleAtoi(Label(job.object, "kueue.x-k8s.io/max-exec-time-seconds"), &seconds) &&
      seconds > 0) {
    workload["spec"]["maximumExecutionTimeSeconds"] = seconds;
  }
  return workload;
}

bool Equivalent(const json& workload, const json& desired) {
  const json& have = Array(Get(Get(workload, "spec"), "podSets"));
  const json& want = Array(Get(Get(desired, "spec"), "podSets"));
  if (have.size() != want.size()) return false;
  for (size_t i = 0; i < have.size(); ++i) {
    if (Get(have[i], "name") != Get(want[i], "name") ||
        Get(have[i], "count") != Get(want[i], "count") ||
        QuotaShape(have[i]) != QuotaShape(want[i])) {
      return false;
    }
  }
  return Get(Get(workload, "spec"), "maximumExecutionTimeSeconds") ==
         Get(Get(desired, "spec"), "maximumExecutionTimeSeconds");
}

AdmissionOrError ReadAdmission(const json& workload, const std::map<std::string, json>& flavors) {
  AdmissionOrError out;
  const json& status = Get(workload, "status");
  const json& admission = Get(status, "admission");
  const std::string name = Str(Get(Get(workload, "metadata"), "name"));
  if (!admission.is_object()) {
    out.error = absl::StrCat("Workload ", name, " is admitted but has no status.admission");
    return out;
  }
  Admission result;
  result.cluster_queue = Str(Get(admission, "clusterQueue"));
  for (const json& assignment : Array(Get(admission, "podSetAssignments"))) {
    const std::string set = Str(Get(assignment, "name"));
    PodSetInfo info;
    info.topology_gate = Get(assignment, "topologyAssignment").is_object();
    info.labels[kPodSetLabel] = set;
    info.annotations[kWorkloadAnnotation] = name;
    std::set<std::string> names;
    const json& assigned = Get(assignment, "flavors");
    if (assigned.is_object()) {
      for (const auto& [resource, flavor] : assigned.items()) names.insert(Str(flavor));
    }
    for (const std::string& flavor : names) {
      auto it = flavors.find(flavor);
      if (it == flavors.end()) {
        out.error = absl::StrCat("ResourceFlavor ", flavor, " (assigned to pod set ", set,
                                 " of Workload ", name, ") does not exist");
        return out;
      }
      const json& spec = Get(it->second, "spec");
      std::string e = MergeMap(&info.node_selector, Get(spec, "nodeLabels"),
                               absl::StrCat("ResourceFlavor ", flavor, " node label"));
      if (!e.empty()) {
        out.error = absl::StrCat("pod set ", set, ": ", e);
        return out;
      }
      AddTolerations(&info.tolerations, Get(spec, "tolerations"));
    }
    for (const json& check : Array(Get(status, "admissionChecks"))) {
      for (const json& update : Array(Get(check, "podSetUpdates"))) {
        if (Str(Get(update, "name")) != set) continue;
        const std::string what = absl::StrCat("admission check ", Str(Get(check, "name")));
        std::string e = MergeMap(&info.labels, Get(update, "labels"), what + " label");
        if (e.empty()) {
          e = MergeMap(&info.annotations, Get(update, "annotations"), what + " annotation");
        }
        if (e.empty()) {
          e = MergeMap(&info.node_selector, Get(update, "nodeSelector"), what + " node selector");
        }
        if (!e.empty()) {
          out.error = absl::StrCat("pod set ", set, ": ", e);
          return out;
        }
        AddTolerations(&info.tolerations, Get(update, "tolerations"));
      }
    }
    result.pod_sets[set] = std::move(info);
  }
  for (const json& pod_set : Array(Get(Get(workload, "spec"), "podSets"))) {
    const std::string set = Str(Get(pod_set, "name"));
    if (result.pod_sets.find(set) == result.pod_sets.end()) {
      out.error =
          absl::StrCat("the admission of Workload ", name, " assigns nothing to pod set ", set);
      return out;
    }
  }
  out.admission = std::move(result);
  return out;
}

std::string PodSetConflict(const PodSetInfo& info, const json& pod) {
  const json& metadata = Get(pod, "metadata");
  const json& spec = Get(pod, "spec");
  for (const std::string& e :
       {MapConflict(metadata, "labels", info.labels, "label"),
        MapConflict(metadata, "annotations", info.annotations, "annotation"),
        MapConflict(spec, "nodeSelector", info.node_selector, "node selector")}) {
    if (!e.empty()) return e;
  }
  const json& gates = Get(spec, "schedulingGates");
  if (info.topology_gate && !gates.is_null() && !gates.is_array()) {
    return "schedulingGates is not a list";
  }
  const json& tolerations = Get(spec, "tolerations");
  if (!info.tolerations.empty() && !tolerations.is_null() && !tolerations.is_array()) {
    return "tolerations is not a list";
  }
  return "";
}

void ApplyPodSetInfo(const PodSetInfo& info, json* pod) {
  json& metadata = (*pod)["metadata"];
  AddToMap(&metadata, "labels", info.labels);
  AddToMap(&metadata, "annotations", info.annotations);
  json& spec = (*pod)["spec"];
  AddToMap(&spec, "nodeSelector", info.node_selector);
  // Kueue's TopologyUngater takes the gate off once it has given the pod its domain.
  if (info.topology_gate) AddToList(&spec, "schedulingGates", {json{{"name", kTopologyGate}}});
  AddToList(&spec, "tolerations", info.tolerations);
}

std::string CheckAdmission(const api::CoordinatedJob& job, const OperatorSettings& settings,
                           const Admission& admission) {
  std::vector<json> pods = {CoordinatorPod(job, 0, absl::UnixEpoch(), settings),
                            WorkerPod(job, 0, 0, settings)};
  if (job.spec.tasks) pods.push_back(DriverPod(job, 0, settings, JobTls::kNone));
  for (const json& pod : pods) {
    const std::string set = PodSetOf(pod);
    auto it = admission.pod_sets.find(set);
    if (it == admission.pod_sets.end()) return absl::StrCat("the admission has no pod set ", set);
    for (const char* ours : {kJobLabel, kRoleLabel, kRestartLabel, kIndexLabel}) {
      if (it->second.labels.count(ours)) {
        return absl::StrCat("pod set ", set, ": label ", ours, " is the operator's");
      }
    }
    if (std::string e = PodSetConflict(it->second, pod); !e.empty()) return e;
  }
  return "";
}

const json* FindCondition(const json& workload, const std::string& type) {
  for (const json& c : Array(Get(Get(workload, "status"), "conditions"))) {
    if (Str(Get(c, "type")) == type) return &c;
  }
  return nullptr;
}

bool IsTrue(const json& workload, const std::string& type) {
  const json* c = FindCondition(workload, type);
  return c && Str(Get(*c, "status")) == "True";
}

bool SetCondition(json* workload, const std::string& type, bool value, const std::string& reason,
                  const std::string& message, absl::Time now) {
  if (!workload->is_object()) return false;
  json& status = (*workload)["status"];
  if (!status.is_object()) status = json::object();
  json& conditions = status["conditions"];
  if (!conditions.is_array()) conditions = json::array();
  const std::string want = value ? "True" : "False";
  const json generation = Get(Get(*workload, "metadata"), "generation");
  json condition = {{"type", type},
                    {"status", want},
                    {"reason", reason},
                    {"message", message},
                    {"lastTransitionTime", api::FormatRfc3339(now)}};
  if (generation.is_number_integer()) condition["observedGeneration"] = generation;
  for (json& c : conditions) {
    if (Str(Get(c, "type")) != type) continue;
    if (Str(Get(c, "status")) == want) {
      if (Str(Get(c, "reason")) == reason && Str(Get(c, "message")) == message) return false;
      condition["lastTransitionTime"] = Get(c, "lastTransitionTime");
    }
    c = std::move(condition);
    return true;
  }
  conditions.push_back(std::move(condition));
  return true;
}

bool DropFinalizer(json* workload) {
  if (!workload->is_object()) return false;
  json& finalizers = (*workload)["metadata"]["finalizers"];
  if (!finalizers.is_array()) return false;
  json kept = json::array();
  for (const json& f : finalizers) {
    if (f != kResourceInUseFinalizer) kept.push_back(f);
  }
  if (kept.size() == finalizers.size()) return false;
  finalizers = std::move(kept);
  return true;
}

bool ClearAdmission(json* workload, absl::Time now) {
  if (!workload->is_object()) return false;
  json& status = (*workload)["status"];
  if (!status.is_object() || !status.contains("admission")) return false;
  status.erase("admission");
  status.erase("reclaimablePods");  // a new admission starts with every pod needed
  const json* evicted = FindCondition(*workload, "Evicted");
  const std::string reason = evicted ? Str(Get(*evicted, "reason")) : "";
  const std::string message = evicted ? Str(Get(*evicted, "message")) : "";
  SetCondition(
      workload, "QuotaReserved", false, "Pending",
      absl::StrCat("the job stopped after its eviction", message.empty() ? "" : ": ", message),
      now);
  SetCondition(workload, "Admitted", false, "NoReservation", "The workload has no reservation",
               now);
  // Kueue queues a workload again at once when the eviction was not of its own doing;
  // otherwise (a timeout, a deactivation) Kueue decides when.
  const bool again = reason == "Preempted" || reason == "NodeFailures";
  SetCondition(workload, "Requeued", again, reason.empty() ? "Evicted" : reason,
               message.empty() ? "evicted" : message, now);
  return true;
}

}  // namespace cohort::controller::kueue
