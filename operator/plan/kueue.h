// Kueue (kueue.x-k8s.io/v1beta2) for CoordinatedJobs: cohort-operator is the job integration
// Kueue calls an external framework. A job labelled kueue.x-k8s.io/queue-name gets one
// Workload, owned by the job, with a pod set per role (the coordinator, the workers, a task
// runtime job's driver); the job starts no pod until Kueue admits that Workload, its pods
// then carry what the admission says (the flavors' node labels as node selectors, their
// tolerations, admission checks' pod set updates); an eviction stops the job (no restart
// counted) and gives the quota back by clearing the admission once the pods are gone; the
// Workload's PodsReady and Finished conditions follow the job. docs/operator.md, "Queued by
// Kueue", has the whole contract and the cluster's Kueue configuration.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "operator/api/coordinated_job.h"
#include "operator/plan/children.h"
#include "operator/plan/observed.h"
#include "operator/plan/plan.h"

namespace cohort::controller::kueue {

using json = nlohmann::json;

inline constexpr char kApiVersion[] = "kueue.x-k8s.io/v1beta2";
inline constexpr char kQueueNameLabel[] = "kueue.x-k8s.io/queue-name";
inline constexpr char kPriorityClassLabel[] = "kueue.x-k8s.io/priority-class";
inline constexpr char kJobUidLabel[] = "kueue.x-k8s.io/job-uid";
inline constexpr char kPodSetLabel[] = "kueue.x-k8s.io/podset";
inline constexpr char kWorkloadAnnotation[] = "kueue.x-k8s.io/workload";
inline constexpr char kResourceInUseFinalizer[] = "kueue.x-k8s.io/resource-in-use";
// Topology-aware scheduling: the gate a pod of a pod set with a topology assignment waits
// behind until Kueue's TopologyUngater places it in its domain.
inline constexpr char kTopologyGate[] = "kueue.x-k8s.io/topology";
// The pod sets of a job's Workload, one per role.
inline constexpr char kCoordinatorPodSet[] = "coordinator";
inline constexpr char kWorkersPodSet[] = "workers";
inline constexpr char kDriverPodSet[] = "driver";

// The LocalQueue the job asks for ("": the job is not queued).
std::string QueueName(const api::CoordinatedJob& job);

// "coordinatedjob-<name>-<5 hex>", the hex from SHA-1 of kind, group, name and uid: the name
// Kueue's own integrations give the Workload of a job, so a job resubmitted under the same
// name (another uid) gets another Workload.
std::string WorkloadName(const api::CoordinatedJob& job);

// The pod set a pod of the job belongs to, by its role label ("" for none).
std::string PodSetOf(const json& pod);

// The Workload the job should have: its queue, and a pod set per role whose template is the
// role's pod as the operator makes it (gang 0), so that Kueue counts the sidecar's requests
// and sees the pods' node selectors, affinity and tolerations. A pod set's topologyRequest
// comes from its pods' TAS annotations (kueue.x-k8s.io/podset-required-topology,
// -preferred-topology, -unconstrained-topology, -slice-required-topology with -slice-size,
// podset-group-name) as Kueue reads them for its own integrations; the workers' pod index
// label is cohort.dev/task-index.
// With `priority` (no error), its spec.priorityClassRef and spec.priority.
json DesiredWorkload(const api::CoordinatedJob& job, const OperatorSettings& settings,
                     const KueueObserved::Priority* priority = nullptr);

// Where a queued job's priority comes from, as Kueue's integrations decide it: the job's
// kueue.x-k8s.io/priority-class label names a WorkloadPriorityClass; else the pods'
// priorityClassName (the workers' template) names a PriorityClass; else the cluster's
// globalDefault PriorityClass, if any; else none (priority 0).
struct PriorityClassSource {
  enum Kind { kNone, kWorkloadPriorityClass, kPriorityClass, kGlobalDefault } kind = kNone;
  std::string name;
};
PriorityClassSource PrioritySourceOf(const api::CoordinatedJob& job);
// The Workload's priority from the class object `found` of `source` (nullopt: not found).
KueueObserved::Priority PriorityFrom(const PriorityClassSource& source,
                                     const std::optional<json>& found);

// Whether `workload` still describes the job as `desired` does: the same pod sets in the same
// order, with the same counts and the same containers (names and resources). Anything else a
// live Workload holds may have been defaulted by the API server.
bool Equivalent(const json& workload, const json& desired);

// The admission of `workload` as PodSetInfo per pod set name: each assigned flavor's node
// labels and tolerations, each admission check's pod set updates, and the podset label and
// workload annotation. An error (a flavor that does not exist, two values for one key) is
// a message for the job's status.
struct Admission {
  std::string cluster_queue;
  std::map<std::string, PodSetInfo> pod_sets;
};
struct AdmissionOrError {
  std::optional<Admission> admission;
  std::string error;
};
AdmissionOrError ReadAdmission(const json& workload, const std::map<std::string, json>& flavors);

// What in `info` contradicts `pod`: a key it has with another value, a field that should be a
// map or a list and is not (the message names it); "" when it applies.
std::string PodSetConflict(const PodSetInfo& info, const json& pod);
// Merges the info into a pod (placement.h's Place), one PodSetConflict found nothing in.
void ApplyPodSetInfo(const PodSetInfo& info, json* pod);
// Whether the admission applies to every pod the job will have (each role's pod as the plan
// makes it), before the plan makes any: what cannot be applied, or "". Keys the operator sets
// itself and varies from pod to pod (the job, role, restart and index labels) are the
// operator's: an admission that sets them cannot be applied.
std::string CheckAdmission(const api::CoordinatedJob& job, const OperatorSettings& settings,
                           const Admission& admission);

// A condition of the Workload (nullptr when it has none of that type).
const json* FindCondition(const json& workload, const std::string& type);
bool IsTrue(const json& workload, const std::string& type);

// Sets a condition in a Workload's status (lastTransitionTime kept while its status stays);
// true if anything changed (false, and nothing changed, for anything but an object).
bool SetCondition(json* workload, const std::string& type, bool value, const std::string& reason,
                  const std::string& message, absl::Time now);

// Removes kResourceInUseFinalizer from the Workload; false if it did not have it.
bool DropFinalizer(json* workload);

// After an eviction, once the job's pods are gone: the quota goes back (no admission,
// QuotaReserved and Admitted False) and the Workload is queued again at once when Kueue
// evicted it for a reason that is not the workload's own (preempted, node failures), else
// when Kueue requeues it (Requeued False with the eviction's reason). False if there was no
// admission to clear.
bool ClearAdmission(json* workload, absl::Time now);

}  // namespace cohort::controller::kueue
