// What the plan sees of a CoordinatedJob's world: its pods, the coordinator's view of its
// tasks, Kueue's objects, the job's other children, and the time. The controller gathers it
// (controller/job_controller.cc); the plan only reads it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/failure_reason.h"
#include "common/task_progress.h"
#include "nlohmann/json.hpp"
#include "operator/api/coordinated_job.h"
#include "operator/plan/job_tls.h"

namespace cohort::controller {

// A pod of the job as the plan needs to see it.
struct ObservedPod {
  std::string name;
  std::string uid;
  std::string role;   // "coordinator", "worker" or (task runtime jobs) "driver"
  int index = -1;     // worker index
  int restart = -1;   // the gang it belongs to (label cohort.dev/restart)
  std::string phase;  // Pending, Running, Succeeded, Failed, Unknown
  bool terminating = false;
  // When its deletion was asked (deletionTimestamp less the grace period), if it was.
  std::optional<absl::Time> deletion_requested_at;
  bool ready = false;
  std::string pod_ip;
  std::string node;  // spec.nodeName: where the scheduler placed it ("" until then)
  // The workload container (a worker's first container; the coordinator's container)
  // ended with this exit code (-1: the pod failed without one, e.g. evicted).
  std::optional<int> exit_code;
  std::optional<absl::Time> finished_at;
  std::string reason;  // why it ended, for messages
  // The pod's DisruptionTarget condition's reason (EvictionByEvictionAPI,
  // PreemptionByScheduler, DeletionByTaintManager, ...), and its own status.reason
  // (Evicted, NodeLost, ...), when it has them.
  std::string disruption;
  std::string pod_reason;
  // Why the scheduler has not placed it (PodScheduled False), when it has not.
  std::string unschedulable;
  // The spec it was made from (children.h, SpecHash); "" for pods made before operators
  // marked them.
  std::string spec_hash;
  // A pod whose containers restart in place (restartPolicy Always: a coordinator with a state
  // volume): a container's exit is not the pod's end, only its phase says that.
  bool restarts_in_place = false;
  int restart_count = 0;  // of the workload container
  // When the workload container last exited (restarts_in_place pods: it may be running again).
  std::optional<absl::Time> last_exit_at;
};

ObservedPod ObservePod(const nlohmann::json& pod);

// A scheduling.k8s.io PodGroup's scheduled condition (PodGroupInitiallyScheduled in 1.37,
// PodGroupScheduled in 1.36), which the kube-scheduler sets.
struct PodGroupScheduled {
  bool scheduled = false;
  std::string reason;  // Scheduled, Unschedulable, SchedulerError
  std::string message;
};
// None before the kube-scheduler set it.
std::optional<PodGroupScheduled> ObservePodGroupScheduled(const nlohmann::json& group);

// What ended a pod, as failure rules name it (api::failure_reason): an eviction, a
// preemption, the node's loss or an OOM kill; "" for a plain exit.
std::string FailureReasonOf(const ObservedPod& pod);

// The coordinator's cluster snapshot, reduced to what decisions need.
struct CoordinatorView {
  int registered = 0;  // workload tasks connected
  struct TaskError {
    std::string task;  // "/job:worker/task:3"
    bool auxiliary = false;
    int code = 0;  // google.rpc.Code
    std::string message;
    // Why, as the coordinator typed it (TaskSnapshot.reason); kUnspecified from a coordinator
    // that keeps no reasons.
    FailureReason reason = FailureReason::kUnspecified;
    // A sidecar's report that its workload exited: the worker's exit code, not this error,
    // says what happened.
    bool IsWorkloadExitReport() const { return reason == FailureReason::kWorkloadExit; }
    // "task /job:worker/task:3 is in error: ..." (a sidecar's task says so).
    std::string Describe() const;
  };
  std::vector<TaskError> errors;  // tasks in ERROR
  // The worker index of a task ("/job:worker/task:3" -> 3; the sidecar's task names the same
  // worker); -1 for none.
  static int TaskIndex(const std::string& task);
  // The task runtime's scheduler (Scheduler/TaskInfo), for task runtime jobs.
  std::optional<api::TaskRuntimeStatus> task_runtime;
  // The incarnation of each CONNECTED task, by task id, of the workload's job: a worker
  // restarted alone (RestartWorker) has rejoined once its task is connected with another.
  std::map<int, uint64_t> workload_incarnations;
  // The progress each task's heartbeats last carried (TaskSnapshot.step and
  // .busy_seconds_per_step), by task name ("/job:sidecar/task:1"), of the tasks whose
  // heartbeats carry one (the sidecars', measuring their workloads): to compare a gang's tasks
  // and find stragglers. Not a change of the view (the watcher's SameView): it moves with
  // every heartbeat.
  std::map<std::string, TaskProgress> progress;
  // The tasks of `progress` that have a pace (busy seconds per step), in name order.
  std::vector<std::string> PacedTasks() const;
};

// Kueue's objects for a job, when the operator runs with Kueue (kueue.h).
struct KueueObserved {
  std::optional<nlohmann::json> workload;         // the job's (kueue::WorkloadName)
  std::map<std::string, nlohmann::json> flavors;  // ResourceFlavors by name
  // The Workload's priority, as Kueue's integrations derive it (kueue::PriorityFor), read by
  // the controller while the job has no Workload.
  struct Priority {
    std::optional<nlohmann::json> ref;  // spec.priorityClassRef; none: no class applies
    int32_t value = 0;
    std::string error;  // the class the job names does not exist (or could not be read)
  };
  Priority priority;
};

struct Observed {
  std::vector<ObservedPod> pods;
  // Absent when the operator runs without Kueue: a queue-name label is then ignored.
  std::optional<KueueObserved> kueue;
  // The job's token Secret exists. When it does not, the plan creates it holding
  // `fresh_token`, a random token the controller made (the plan has no randomness of its own).
  bool token_secret = false;
  std::string fresh_token;
  // TLS for the job (children.h, OperatorSettings::job_tls): what the existing Secret was made
  // with (TlsModeOf); for a Secret to create, the settings' mode, with the certificates the
  // controller made in `fresh_certificates` when that mode is the operator's.
  JobTls token_secret_tls = JobTls::kNone;
  std::optional<JobCertificates> fresh_certificates;
  // With cert-manager: both of the job's Secrets (CoordinatorTlsName, ClientTlsName) hold a
  // CA, a certificate and a key. Until then the plan asks for the Certificates and starts no
  // pod.
  bool certificates_issued = false;
  // The job's NetworkPolicy as the API server has it (absent: there is none).
  std::optional<nlohmann::json> network_policy;
  bool coordinator_config_map = false;
  // Its SpecHash annotation ("" if none) and resourceVersion, for writing it anew.
  std::string coordinator_config_hash;
  std::string coordinator_config_version;
  bool coordinator_service = false;
  bool workers_service = false;
  // The coordinator's PersistentVolumeClaim (spec.coordinator.state.volume
  // PersistentVolumeClaim), and whether it is being deleted.
  bool coordinator_state_claim = false;
  bool coordinator_state_claim_terminating = false;
  std::optional<CoordinatorView> coordinator;  // absent: not reachable (yet)
  // spec.gangScheduling.podGroup Kubernetes: its PodGroup's scheduled condition, once the
  // kube-scheduler has set it.
  std::optional<PodGroupScheduled> pod_group_scheduled;
  // When the controller first saw a failure of the current gang (absent: not yet).
  std::optional<absl::Time> failure_first_seen;
  // The failure reasons (api::failure_reason) the plans have seen since then: an evicted
  // pod's reason is gone with the pod, which may be before the failure settles.
  std::vector<std::string> failure_reasons;
  absl::Time now;
};

}  // namespace cohort::controller
