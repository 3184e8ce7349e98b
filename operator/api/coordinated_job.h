// CoordinatedJob (cohort.dev/v1alpha1) as C++ types, read from and written to the JSON the
// API server serves. The CRD in charts/cohort/crds/ is the schema; this file must agree.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace cohort::api {

using json = nlohmann::json;

inline constexpr char kGroup[] = "cohort.dev";
inline constexpr char kApiVersion[] = "cohort.dev/v1alpha1";
inline constexpr char kKind[] = "CoordinatedJob";

enum class Framework { kGeneric, kJax, kTensorflow, kPytorch };
enum class SuccessPolicy { kAllWorkers, kWorker0 };
// Where the coordinator keeps its durable state (cohort-coordinator --state-dir).
enum class StateVolume { kEmptyDir, kPersistentVolumeClaim, kNone };

namespace phase {
inline constexpr char kPending[] = "Pending";
inline constexpr char kRunning[] = "Running";
inline constexpr char kRestarting[] = "Restarting";
inline constexpr char kSucceeded[] = "Succeeded";
inline constexpr char kFailed[] = "Failed";
inline constexpr char kSuspended[] = "Suspended";
}  // namespace phase

struct CoordinatorStateSpec {
  StateVolume volume = StateVolume::kEmptyDir;
  // volume Auto (the default): the operator chooses once, a PersistentVolumeClaim where the
  // cluster has a default StorageClass, else an emptyDir, and keeps its choice in
  // status.coordinatorStateVolume. Until then `volume` is kEmptyDir.
  bool volume_auto = true;
  // PersistentVolumeClaim (or Auto, which it makes one) only; "" : the cluster's default
  std::string storage_class_name;
  std::string size = "1Gi";  // the claim's request, or the emptyDir's sizeLimit
};

struct CoordinatorSpec {
  std::string image;  // "" : the operator's default
  json resources = json::object();
  std::string heartbeat_timeout = "30s";
  std::string register_timeout = "10m";
  std::string shutdown_barrier_timeout = "5m";
  // How long the workload's sidecars ride out an unreachable coordinator (a restart) before
  // its calls fail.
  std::string outage_tolerance = "60s";
  // spec.coordinator.podTemplate: metadata (labels, annotations) and the scheduling fields
  // of kCoordinatorSchedulingFields, which override those of the workers' template.
  json pod_template = json::object();
  CoordinatorStateSpec state;
  // spec.coordinator.recoverable: the workload's tasks (and their sidecars) may leave and
  // register again without failing the job (cohort-coordinator --recoverable-job); what lets a
  // failure rule restart one worker alone (FailureAction::kRestartWorker).
  bool recoverable = false;
};

// The pod spec fields the coordinator takes from spec.template.spec (unless
// spec.coordinator.podTemplate.spec sets them): it must fit on the nodes the workers fit on.
inline constexpr const char* kCoordinatorSchedulingFields[] = {
    "nodeSelector",      "tolerations",      "affinity",
    "priorityClassName", "imagePullSecrets", "schedulerName"};

struct SidecarSpec {
  std::string image;  // "" : the operator's default
  json resources = json::object();
  std::optional<std::vector<int>> ignored_xids;
  bool dcgm_metrics = false;
  // spec.sidecar.stackDumps: the sidecar may trace the workload (root with SYS_PTRACE) to
  // record its stacks before a hang is reported; only the privileged Pod Security Standard
  // admits it, so off unless asked.
  bool stack_dumps = false;
};

// spec.failurePolicy.rules (operator/api/failure_rules.cc): matched in order against what ended
// a gang; the first that matches decides, before the exit code rule.
enum class FailureAction {
  kFailJob,               // the job fails
  kRestartGang,           // the gang restarts, counted against maxRestarts
  kRestartGangUncounted,  // the gang restarts; status.uncountedRestarts counts it
  // Only the failed workers' pods are made again, the rest of the gang runs on
  // (spec.coordinator.recoverable); status.workerRestarts counts it, against maxRestarts.
  kRestartWorker,
};
// What ended a gang, as rules name it.
namespace failure_reason {
inline constexpr char kEvicted[] = "Evicted";        // the kubelet or the eviction API
inline constexpr char kPreempted[] = "Preempted";    // the scheduler, for a pod of more priority
inline constexpr char kOOMKilled[] = "OOMKilled";    // a workload container over its memory
inline constexpr char kNodeLost[] = "NodeLost";      // the node went away or shut down
inline constexpr char kPodDeleted[] = "PodDeleted";  // deleted by someone, no other reason
inline constexpr char kGPUFault[] = "GPUFault";      // the sidecar's GPU health check
inline constexpr char kHeartbeatTimeout[] = "HeartbeatTimeout";
inline constexpr char kHang[] = "Hang";  // a task made no progress (sidecar, jaxlib watchdog)
// A task far slower than its gang. Nothing reports it yet; rules may already name it.
inline constexpr char kStraggler[] = "Straggler";
inline constexpr char kCoordinatorLost[] = "CoordinatorLost";
inline constexpr char kTaskError[] = "TaskError";  // any other error a task reported
}  // namespace failure_reason
struct FailureRule {
  FailureAction action = FailureAction::kRestartGang;
  std::vector<int> on_exit_codes;       // a worker that exited first exited with one of these
  std::vector<std::string> on_reasons;  // or what ended the gang is one of these
};

struct FailurePolicy {
  int max_restarts = 3;
  std::vector<int> retryable_exit_codes;  // in addition to / instead of the default rule
  std::vector<int> permanent_exit_codes;
  std::vector<FailureRule> rules;
  // A gang whose workers are not all running this long after it started fails the job
  // (StartupDeadlineExceeded). None: no deadline.
  std::optional<int64_t> startup_deadline_seconds;
  // A running task whose workload shows no progress this long is hung (reason Hang): the
  // sidecars' --progress-timeout (docs/sidecar.md, "Progress and hangs"). "": never.
  std::string progress_timeout;
  // failurePolicy.stragglers: a task whose busy seconds per step reach `ratio` times the
  // median of the rest of the gang's for `after` is named in an Event (plan/stragglers.cc).
  struct Stragglers {
    double ratio = 2.0;
    absl::Duration after = absl::Minutes(2);
  } stragglers;
  // failurePolicy.avoidNodeAfterGPUFault: after a worker's GPU fault, the gang's workers keep
  // off its node this long (required node affinity on the pods made after it; the node is
  // never cordoned), and the gang's restart is not counted unless a rule says otherwise.
  // Zero: the node is not avoided.
  absl::Duration avoid_node_after_gpu_fault = absl::Hours(1);
};

// spec.tasks: the task runtime (docs/tasks.md, "On Kubernetes") instead of a gang.
struct TaskRuntimeSpec {
  int workers_per_pod = 1;
  std::string object_store_memory;  // "" : the sizing rule (ObjectStoreBytes)
  int task_retries = 3;
  std::string task_liveness_timeout = "5s";
  json driver_template = json::object();  // a PodTemplateSpec
};

// spec.gangScheduling: a PodGroup for the job's pods, so that a gang scheduler places all of
// them or none (operator/api/gang_scheduling.cc; docs/operator.md, "Gang scheduling"):
// scheduler-plugins' coscheduling, Volcano, or Kubernetes' own (the kube-scheduler's
// GangScheduling plugin, scheduling.k8s.io Workload and PodGroup).
enum class PodGroupKind { kSchedulerPlugins, kVolcano, kKubernetes };
struct GangSchedulingSpec {
  PodGroupKind pod_group = PodGroupKind::kSchedulerPlugins;
  std::string scheduler_name;  // "" : the provider's (scheduler-plugins-scheduler, volcano)
  std::optional<int> schedule_timeout_seconds;  // SchedulerPlugins only
  std::string queue;                            // Volcano only
};

// spec.pytorch (framework: pytorch): how many processes each pod runs (torchrun's
// --nproc-per-node). Unset: the GPUs the template's containers ask for, or 1 without GPUs.
struct PytorchSpec {
  std::optional<int> nproc_per_node;
};

// spec.elastic (framework: pytorch): torchrun's elastic membership, --nnodes=min:max over the
// c10d rendezvous in the sidecars' store, each agent restarting its processes up to
// max_restarts times when the membership changes. A worker whose pod is lost is made again
// alone (an implied RestartWorker rule), and its agent joins a new rendezvous round.
struct ElasticSpec {
  int min_replicas = 1;
  int max_replicas = 1;
  int max_restarts = 3;
};

struct JobSpec {
  int replicas = 1;
  Framework framework = Framework::kGeneric;
  PytorchSpec pytorch;
  std::optional<ElasticSpec> elastic;
  json pod_template = json::object();  // a PodTemplateSpec
  CoordinatorSpec coordinator;
  SidecarSpec sidecar;
  FailurePolicy failure_policy;
  SuccessPolicy success_policy = SuccessPolicy::kAllWorkers;
  std::optional<int64_t> active_deadline_seconds;
  std::optional<int> ttl_seconds_after_finished;
  bool suspend = false;
  std::optional<TaskRuntimeSpec> tasks;
  std::optional<GangSchedulingSpec> gang_scheduling;
};

struct Condition {
  std::string type;
  std::string status;  // "True", "False", "Unknown"
  std::string reason;
  std::string message;
  std::string last_transition_time;  // RFC 3339
  int64_t observed_generation = 0;
  bool operator==(const Condition& o) const;
};

struct TaskCounts {
  int total = 0;
  int registered = 0;
  int ready = 0;
  int succeeded = 0;
  int failed = 0;
  bool operator==(const TaskCounts& o) const;
};

// What the operator last saw of the current gang's coordinator pod, so that each restart
// of the coordinator is counted once (status.coordinatorPod).
struct CoordinatorPodStatus {
  std::string uid;             // "": none seen since the operator (re)created it
  int container_restarts = 0;  // its container's restartCount, already counted
  // When the coordinator last went away (its container exited, or its pod was lost).
  std::optional<absl::Time> last_restart_time;
  bool operator==(const CoordinatorPodStatus& o) const;
};

// status.taskRuntime: the scheduler's task counts (TaskInfo).
struct TaskRuntimeStatus {
  int64_t succeeded = 0;
  int64_t failed = 0;
  int64_t running = 0;
  bool operator==(const TaskRuntimeStatus& o) const;
  bool operator!=(const TaskRuntimeStatus& o) const { return !(*this == o); }
};

// A worker whose pod a RestartWorker rule replaces (status.restartingWorkers): the pod that
// failed, until its successor is there and its task no longer in error at the coordinator.
struct RestartingWorker {
  int index = 0;
  std::string uid;  // the failed pod's
  // Its task's incarnation at the coordinator when it failed (decimal; "" if unknown): the
  // successor has rejoined once the task is connected with another.
  std::string incarnation;
  bool operator==(const RestartingWorker& o) const {
    return index == o.index && uid == o.uid && incarnation == o.incarnation;
  }
};

// status.straggler: the running gang's task that lags the rest (failurePolicy.stragglers),
// while it does.
struct StragglerStatus {
  int worker = 0;
  // Its busy seconds per step over the median of the others', when it began to lag and
  // again when it was reported.
  double score = 0;
  absl::Time since;
  bool reported = false;  // its Event was sent
  bool operator==(const StragglerStatus& o) const {
    return worker == o.worker && score == o.score && since == o.since && reported == o.reported;
  }
};

// status.avoidedNodes: a node the gang's workers keep off until `until`, because a worker's GPU
// failed there (failurePolicy.avoidNodeAfterGPUFault).
struct AvoidedNode {
  std::string node;
  absl::Time until;
  std::string reason = "GPUFault";  // a failure reason (failure_reason)
  std::string message;              // the failure, in words (bounded)
  bool operator==(const AvoidedNode& o) const {
    return node == o.node && until == o.until && reason == o.reason && message == o.message;
  }
};
// At most this many in status.avoidedNodes; the one that ends first makes room.
inline constexpr size_t kMaxAvoidedNodes = 32;

// status.lastFailure: the last failure of a gang and its recovery, as `kubectl describe` shows
// it and the goodput metrics read it (plan/goodput.cc).
struct FailureTimeline {
  std::string cause;                 // the Restarting or Failed condition's reason
  std::vector<std::string> reasons;  // as failure rules name them (failure_reason)
  std::string message;               // what failed, in words (bounded)
  // When it failed, as far as the operator can tell: the first worker's exit, a hung task's
  // last progress (its report less failurePolicy.progressTimeout), else when it was seen.
  absl::Time failed_at;
  absl::Time detected_at;  // when the operator first saw it
  absl::Time decided_at;   // when it decided: the gang's restart, a worker's, or the job's end
  // When every task of the gang after it had registered again: the training goes on.
  std::optional<absl::Time> recovered_at;
  bool operator==(const FailureTimeline& o) const {
    return cause == o.cause && reasons == o.reasons && message == o.message &&
           failed_at == o.failed_at && detected_at == o.detected_at && decided_at == o.decided_at &&
           recovered_at == o.recovered_at;
  }
};

// status.goodput: how much of the job's time its gang had every task registered, training.
struct Goodput {
  // When every task of the current gang had registered; absent until then and after its end.
  std::optional<absl::Time> gang_registered_time;
  // Seconds the gangs before the current one had every task registered, to their failure.
  double productive_seconds = 0;
  // Seconds from the job's creation to its first gang's tasks all registered.
  std::optional<double> startup_seconds;
  bool operator==(const Goodput& o) const {
    return gang_registered_time == o.gang_registered_time &&
           productive_seconds == o.productive_seconds && startup_seconds == o.startup_seconds;
  }
};

struct JobStatus {
  std::string phase;  // "" until the operator first saw the job
  int restarts = 0;
  // Workers restarted alone (RestartWorker), each counted against maxRestarts with restarts;
  // the gang goes on.
  int worker_restarts = 0;
  std::vector<RestartingWorker> restarting_workers;
  // Gang restarts a failure rule did not count (RestartGangUncounted): not against maxRestarts.
  int uncounted_restarts = 0;
  // When the current gang started (its first start, a restart, a resume or an admission).
  std::optional<absl::Time> gang_start_time;
  // The current gang's number, the cohort.dev/restart label of its pods.
  int Gang() const { return restarts + uncounted_restarts; }
  // Coordinator restarts that kept the gang: its container restarted in place, or its pod
  // was recreated on the job's PersistentVolumeClaim.
  int coordinator_restarts = 0;
  CoordinatorPodStatus coordinator_pod;
  // Where the coordinator's state is: "PersistentVolumeClaim", "EmptyDir" or "None"
  // (status.coordinatorStateVolume): the spec's volume, or what the operator chose for Auto.
  std::string state_volume;
  TaskCounts tasks;
  std::optional<TaskRuntimeStatus> task_runtime;
  std::string coordinator_address;
  std::optional<absl::Time> start_time;
  std::optional<absl::Time> completion_time;
  int64_t observed_generation = 0;
  std::vector<Condition> conditions;
  std::optional<StragglerStatus> straggler;
  std::vector<AvoidedNode> avoided_nodes;
  std::optional<FailureTimeline> last_failure;
  Goodput goodput;
  bool operator==(const JobStatus& o) const;
  bool operator!=(const JobStatus& o) const { return !(*this == o); }
};

struct CoordinatedJob {
  std::string name;
  std::string namespace_name;
  std::string uid;
  int64_t generation = 0;
  std::string resource_version;
  JobSpec spec;
  JobStatus status;
  json object;  // as read, for writing the status back
};

// Reads a CoordinatedJob; InvalidArgument names the field that is wrong. The API server
// has validated the object already (the CRD's schema), so this only fails on objects that
// bypassed it or on rules the schema cannot express.
absl::StatusOr<CoordinatedJob> ParseCoordinatedJob(const json& object);

json StatusToJson(const JobStatus& status);

// Reads spec.failurePolicy's rules and startupDeadlineSeconds into `out`; InvalidArgument
// names the field.
absl::Status ParseFailureRules(const json& failure_policy, FailurePolicy* out);
std::string FailureActionName(FailureAction action);

// Reads spec.gangScheduling into `out`; InvalidArgument names the field.
absl::Status ParseGangScheduling(const json& gang, GangSchedulingSpec* out);
std::string PodGroupKindName(PodGroupKind kind);

// Whether a worker exit code restarts the gang (true) or fails the job (false): the
// job's lists first, then the default rule (128 and above: killed by a signal, retryable).
bool IsRetryableExitCode(const FailurePolicy& policy, int exit_code);

// Bytes in a resource quantity ("2Gi", "512M", "1.5G", "1000"); none for anything else.
std::optional<uint64_t> QuantityBytes(const std::string& text);

// The object store's capacity in each pod of a task runtime job, and the size of the
// memory-backed volume its objects live in: spec.tasks.objectStoreMemory, or 30% of the first
// container's memory limit (else request) of `pod_template`, at least 64 MiB; 1 GiB when it
// sets neither.
uint64_t ObjectStoreBytes(const TaskRuntimeSpec& tasks, const json& pod_template);

std::string FrameworkName(Framework f);
std::string StateVolumeName(StateVolume v);
// "EmptyDir", "PersistentVolumeClaim" or "None"; none for anything else.
std::optional<StateVolume> ParseStateVolumeName(const std::string& name);
// The coordination job name the workload's tasks register under: jaxlib always uses
// "jax_worker"; TensorFlow and cohort's agent use "worker".
std::string WorkloadJobName(Framework f);

// "2026-11-22T15:04:05Z" and back.
std::string FormatRfc3339(absl::Time t);
// With milliseconds, for the times of status.lastFailure and status.goodput.
std::string FormatRfc3339Millis(absl::Time t);
std::optional<absl::Time> ParseRfc3339(const std::string& text);

// Sets a condition, keeping lastTransitionTime when its status does not change.
void SetCondition(std::vector<Condition>* conditions, const std::string& type,
                  const std::string& status, const std::string& reason, const std::string& message,
                  absl::Time now, int64_t generation);
const Condition* FindCondition(const std::vector<Condition>& conditions, const std::string& type);

}  // namespace cohort::api
