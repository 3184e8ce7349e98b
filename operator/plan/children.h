// What the operator creates for a CoordinatedJob: the job's token Secret, its NetworkPolicy,
// the coordinator's ConfigMap, Pod, Service and (state on a PersistentVolumeClaim) its claim,
// the workers' headless Service, and worker Pods with the sidecar injected and the env
// contract of DESIGN.md. Pure functions of the job and the operator's settings (and, for the
// Secret, of a token made elsewhere).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "operator/api/coordinated_job.h"
#include "operator/plan/job_tls.h"
#include "operator/plan/placement.h"

namespace cohort::controller {

using json = nlohmann::json;

inline constexpr char kManagedByLabel[] = "app.kubernetes.io/managed-by";
inline constexpr char kManagedBy[] = "cohort-operator";
inline constexpr char kJobLabel[] = "cohort.dev/job";
inline constexpr char kRoleLabel[] = "cohort.dev/role";
inline constexpr char kRestartLabel[] = "cohort.dev/restart";
inline constexpr char kIndexLabel[] = "cohort.dev/task-index";
inline constexpr char kSidecarContainer[] = "cohort-sidecar";
inline constexpr char kHandoffDir[] = "/var/run/cohort";
inline constexpr int kCoordinatorGrpcPort = 8476;
inline constexpr int kCoordinatorHttpPort = 8477;
inline constexpr int kSidecarHttpPort = 9477;
// The workload's coordinator endpoint: its sidecar's proxy (cohort-sidecar --proxy-listen),
// on the pod's loopback, which forwards to the coordinator and rides out its restarts.
inline constexpr char kSidecarProxyAddress[] = "127.0.0.1:8476";
// framework: pytorch: the sidecar's TCPStore (--torch-store-proxy-listen), where MASTER_ADDR
// and MASTER_PORT point (torch's default port).
inline constexpr char kSidecarTorchStoreHost[] = "127.0.0.1";
inline constexpr int kSidecarTorchStorePort = 29500;
// Where JAX's process 0 starts jaxlib's own coordination service, which nobody uses: a
// loopback port apart from the proxy's (jax reads JAX_COORDINATOR_BIND_ADDRESS).
inline constexpr char kJaxUnusedServiceAddress[] = "127.0.0.1:18476";
inline constexpr int kTensorflowPort = 2222;
// Where the coordinator keeps its durable state (--state-dir), when the job keeps one.
inline constexpr char kCoordinatorStateDir[] = "/var/lib/cohort/state";
// A PersistentVolumeClaim's whole volume, beside the gang's own directory on it.
inline constexpr char kCoordinatorStateVolumeDir[] = "/var/lib/cohort/state-volume";
// The job's token (--auth-token-file of the coordinator and every sidecar): a Secret per job,
// its key, and where the coordinator's and the sidecars' containers mount it.
inline constexpr char kTokenKey[] = "token";
inline constexpr char kTokenVolume[] = "cohort-token";
inline constexpr char kTokenDir[] = "/var/run/secrets/cohort";
inline constexpr char kTokenFile[] = "/var/run/secrets/cohort/token";
// With --job-tls=operator the same Secret holds the job's certificates (certificates.h), and
// each container mounts what it needs next to the token: the coordinator its own certificate,
// the sidecars the client one, both the job's CA.
inline constexpr char kCaCertKey[] = "ca.crt";
inline constexpr char kCoordinatorCertKey[] = "coordinator.crt";
inline constexpr char kCoordinatorKeyKey[] = "coordinator.key";
inline constexpr char kClientCertKey[] = "client.crt";
inline constexpr char kClientKeyKey[] = "client.key";
// With --job-tls=cert-manager the certificates come from two cert-manager Certificates per
// job, each issued into a Secret of its own (keys below, cert-manager's); the containers
// mount them under the names above, so that the programs' flags are the same in both modes.
// The token Secret carries this annotation, which is how a job remembers its mode.
inline constexpr char kTlsModeAnnotation[] = "cohort.dev/tls";
inline constexpr char kCertManagerCertKey[] = "tls.crt";
inline constexpr char kCertManagerKeyKey[] = "tls.key";
inline constexpr char kCertManagerCaKey[] = "ca.crt";

// The coordinator's and sidecar's images' user (and group); the coordinator pod's fsGroup, so
// that it can write its state volume.
inline constexpr int kCoordinatorUser = 65532;
inline constexpr int kSidecarUser = 65532;
// Task runtime jobs (spec.tasks): the object store each pod's sidecar hosts, and the
// memory-backed volume its objects live in, shared with the workload at /dev/shm.
inline constexpr int kObjectStorePort = 9478;
inline constexpr char kObjectStoreVolume[] = "cohort-objects";
inline constexpr char kObjectStoreDir[] = "/dev/shm";
// The job's token alone (no certificate), for the workload's containers of a task runtime
// job, at kTokenFile: its workers serve WorkerService on the pod's IP and require the token of
// every call (COHORT_AUTH_TOKEN_FILE), as the scheduler sends it.
inline constexpr char kWorkloadTokenVolume[] = "cohort-workload-token";
// The label every namespace carries with its own name (set by the API server).
inline constexpr char kNamespaceNameLabel[] = "kubernetes.io/metadata.name";
// Requests and limits of a coordinator whose job sets none: small, and equal, so that the
// pod is Guaranteed (the last to be evicted).
inline constexpr char kCoordinatorDefaultCpu[] = "500m";
inline constexpr char kCoordinatorDefaultMemory[] = "512Mi";

struct OperatorSettings {
  std::string coordinator_image = "ghcr.io/cohort/cohort-coordinator:0.1.0";
  std::string sidecar_image = "ghcr.io/cohort/cohort-sidecar:0.1.0";
  // How the sidecar notices the workload exiting: process (the pod shares one process
  // namespace), file, http or none (the operator still sees the pod's exit).
  std::string workload_liveness = "process";
  // After the first sign of a failure, how long to wait for the rest of the gang's exits
  // before deciding between restart and failure (see PlanJob).
  absl::Duration failure_settle = absl::Seconds(1);
  // The job's NetworkPolicy (see NetworkPolicy below); false: none, and the operator deletes
  // those it made before.
  bool network_policy = true;
  // Where the operator's own pods run, and their labels: the only pods besides the job's that
  // reach its coordinator's gRPC port. An empty namespace (the operator runs outside the
  // cluster) leaves that rule out.
  std::string operator_namespace;
  std::map<std::string, std::string> operator_pod_labels;
  // The namespace whose pods may scrape the coordinator's and the sidecars' metrics ports
  // (Prometheus). Empty: none.
  std::string metrics_namespace;
  // "operator": every new job gets certificates of its own (certificates.h) and runs its
  // coordinator with mutual TLS; "cert-manager": the same, with certificates that
  // cert-manager issues from `job_tls_issuer`; "none": plain gRPC (the token still guards it).
  // A job keeps what its Secret was made with.
  std::string job_tls = "none";
  // With job_tls "cert-manager": the issuer, "Issuer/<name>" (in the job's namespace) or
  // "ClusterIssuer/<name>".
  std::string job_tls_issuer;
  // How a worker pod's sidecar sees the pod's GPUs (docs/sidecar.md, "Seeing the pod's
  // GPUs"). DRA claims of the workload's containers are always shared with the sidecar. With
  // the NVIDIA device plugin: "none" (the sidecar sees no GPU, and says so) or
  // "visible-devices" (the sidecar of a pod that asks for nvidia.com/gpu gets
  // NVIDIA_VISIBLE_DEVICES=all and the kubelet's PodResources socket, and watches the GPUs the
  // kubelet gave its pod; it runs as root for the socket, so the namespace must allow hostPath
  // volumes and root containers: Pod Security level privileged).
  std::string sidecar_gpu_access = "none";
  // The version of scheduling.k8s.io Workload and PodGroup the cluster serves, for jobs with
  // spec.gangScheduling.podGroup Kubernetes: kKubernetesSchedulingApi (1.37), or
  // kKubernetesSchedulingApiV1Alpha2 (1.36, its own shape); "" when it serves neither (the
  // GenericWorkload feature gate is off), and such jobs fail, saying so.
  std::string kubernetes_scheduling_api;
};

// What a worker pod's template asks for in GPUs: the device plugin's nvidia.com/gpu (and MIG's
// nvidia.com/mig-*) limits of its containers, and the pod-level DRA claims they reference.
struct TemplateGpus {
  int count = 0;
  nlohmann::json claims = nlohmann::json::array();  // resources.claims entries, deduplicated
};
TemplateGpus TemplateGpusOf(const nlohmann::json& pod_template);
inline constexpr char kPodResourcesDir[] = "/var/lib/kubelet/pod-resources";

// The mode `job_tls` names for new jobs.
JobTls NewJobTls(const OperatorSettings& settings);

std::string CoordinatorName(const api::CoordinatedJob& job);     // Pod, Service, ConfigMap
std::string WorkersServiceName(const api::CoordinatedJob& job);  // headless
std::string WorkerPodName(const api::CoordinatedJob& job, int index);
// "<job>-coordinator.<namespace>.svc:8476"
std::string CoordinatorAddress(const api::CoordinatedJob& job);
// The names in the coordinator's certificate: "<job>-coordinator" with ".<ns>", ".<ns>.svc"
// and ".<ns>.svc.cluster.local"; the third is what its clients verify.
std::vector<std::string> CoordinatorDnsNames(const api::CoordinatedJob& job);
std::string CoordinatorServerName(const api::CoordinatedJob& job);
// "<job>-coordinator-state": the coordinator's PersistentVolumeClaim.
std::string CoordinatorStateClaimName(const api::CoordinatedJob& job);
// "<job>-token": the Secret with the job's token.
std::string TokenSecretName(const api::CoordinatedJob& job);
// "<job>-isolation": the job's NetworkPolicy.
std::string NetworkPolicyName(const api::CoordinatedJob& job);
// With cert-manager: "<job>-coordinator-tls" and "<job>-client-tls", each the name of a
// Certificate and of the Secret cert-manager issues it into.
std::string CoordinatorTlsName(const api::CoordinatedJob& job);
std::string ClientTlsName(const api::CoordinatedJob& job);
// "<job>.<namespace>.client.cohort.dev": the name the job's client certificate carries and
// its coordinator requires (--tls-client-name), since a shared issuer signs other jobs'
// client certificates too.
std::string ClientIdentity(const api::CoordinatedJob& job);

json OwnerReference(const api::CoordinatedJob& job);
// With TLS, the coordinator serves mutual TLS with the job's certificates (and, with
// cert-manager's, requires ClientIdentity in its clients' certificates).
json CoordinatorConfigMap(const api::CoordinatedJob& job, JobTls tls = JobTls::kNone);
// The job's token Secret (immutable: the token never changes while the Secret lives), with
// the job's certificates when given, and its TLS mode when that is cert-manager.
json TokenSecret(const api::CoordinatedJob& job, const std::string& token,
                 const JobCertificates* certificates = nullptr, JobTls tls = JobTls::kNone);
// The token a TokenSecret holds ("" if it holds none).
std::string TokenOf(const json& secret);
// The certificates a TokenSecret holds (none: made without TLS, or incomplete).
std::optional<JobCertificates> CertificatesOf(const json& secret);
// The mode a TokenSecret was made with.
JobTls TlsModeOf(const json& secret);
// The two cert-manager Certificates of a job (the coordinator's, serverAuth for
// CoordinatorDnsNames; the clients', clientAuth for ClientIdentity), issued by
// settings.job_tls_issuer into Secrets labelled as the job's children. P-256 keys, made anew
// at every renewal.
std::vector<json> CertManagerCertificates(const api::CoordinatedJob& job,
                                          const OperatorSettings& settings);
// What a Secret cert-manager issued holds: the CA, the certificate and its key (for the
// client Secret: what the operator dials the coordinator with). None while any is missing.
struct IssuedCertificate {
  std::string ca, cert, key;
};
std::optional<IssuedCertificate> IssuedOf(const json& secret);
json CoordinatorService(const api::CoordinatedJob& job);
// The job's NetworkPolicy (ingress only) over every pod of the job (the coordinator and the
// workers): the job's own pods reach each other on every port (the workers' collectives, the
// sidecars' calls to the coordinator); the operator's pods reach the coordinator's gRPC port;
// the metrics namespace's pods reach the coordinator's HTTP port and the sidecars' (metrics,
// /v1/alive). Nothing else gets in. Egress is not restricted.
json NetworkPolicy(const api::CoordinatedJob& job, const OperatorSettings& settings);
// Only for spec.coordinator.state.volume PersistentVolumeClaim.
json CoordinatorStateClaim(const api::CoordinatedJob& job);
// The coordinator's resources: the job's, with requests and limits made equal where only one
// is given, and the defaults above for cpu and memory when neither is.
json CoordinatorResources(const json& given);
json WorkersService(const api::CoordinatedJob& job);
// The directory of the state volume that holds one coordinator's state:
// "<started>-gang-<restart>", started being status.startTime (set again when a suspended job
// resumes). Neither a gang restart nor a resume finds an earlier coordinator's state there;
// a coordinator restarted within its gang finds its own.
std::string CoordinatorStateSubPath(absl::Time started, int restart);
// The coordinator of gang `restart` of the run that started at `started`. It takes the
// workers' scheduling fields (node selector, tolerations, affinity, priority class, image pull
// secrets, scheduler), which spec.coordinator.podTemplate overrides; with a state volume it
// restarts in place (restartPolicy Always) and keeps its state in CoordinatorStateSubPath.
// `tls`: where the job's certificates are (the token Secret, or cert-manager's Secrets
// projected next to the token), which the coordinator and the sidecars mount and use.
// `placement` (placement.h) is applied last, to each of the three builders' pods.
json CoordinatorPod(const api::CoordinatedJob& job, int restart, absl::Time started,
                    const OperatorSettings& settings, JobTls tls = JobTls::kNone,
                    const Placement& placement = Placement{});
// Task runtime jobs: the driver's pod, "<job>-driver", from spec.tasks.driver.template, with
// the same sidecar and env as a worker pod.
std::string DriverPodName(const api::CoordinatedJob& job);
json DriverPod(const api::CoordinatedJob& job, int restart, const OperatorSettings& settings,
               JobTls tls, const Placement& placement = Placement{});
// Makes a worker or driver pod a task runtime pod: the sidecar hosts the pod's object store
// (--task-runtime --objstore-*), a memory-backed volume sized by api::ObjectStoreBytes is
// shared at /dev/shm, and the workload's containers get COHORT_SCHEDULER (the sidecar's
// endpoint), COHORT_OBJSTORE, COHORT_NODE_IP, COHORT_TASK_WORKERS and the job's token
// (COHORT_AUTH_TOKEN_FILE, the token alone mounted at kTokenFile).
void AddTaskRuntime(const api::CoordinatedJob& job, json* pod);

json WorkerPod(const api::CoordinatedJob& job, int index, int restart,
               const OperatorSettings& settings, JobTls tls = JobTls::kNone,
               const Placement& placement = Placement{});

// spec.gangScheduling: the job's PodGroup, named as the job, for scheduler-plugins' coscheduling
// plugin (scheduling.x-k8s.io/v1alpha1) or Volcano (scheduling.volcano.sh/v1beta1); none
// without spec.gangScheduling. Its members are the gang's workers, minMember all of them: the
// workers hold the accelerators two half-placed jobs would deadlock on, and they are made once
// the coordinator is ready (which a group that waited for the coordinator too never would be).
// The coordinator (and a task runtime job's driver) is placed on its own, by the template's
// scheduler. JoinPodGroup makes a worker pod one of the group's: the label or annotation that
// names it, and the gang scheduler as its scheduler.
// podGroup Kubernetes: the kube-scheduler's own (scheduling.k8s.io/v1beta1, Kubernetes 1.37
// with the GenericWorkload feature gate): a Workload named as the job, whose one PodGroup
// template (kWorkersTemplate) is the gang, and the PodGroup made from it, named as the job too,
// both before the first workers (KubernetesWorkload, PodGroup); a worker joins it by its
// spec.schedulingGroup and keeps its template's scheduler unless schedulerName names one. The
// group's priority class is the workers' (the scheduler places a gang only when its pods'
// priority is the group's).
inline constexpr char kSchedulerPluginsPodGroupLabel[] = "scheduling.x-k8s.io/pod-group";
inline constexpr char kVolcanoPodGroupAnnotation[] = "scheduling.k8s.io/group-name";
inline constexpr char kSchedulerPluginsScheduler[] = "scheduler-plugins-scheduler";
inline constexpr char kVolcanoScheduler[] = "volcano";
inline constexpr char kKubernetesSchedulingApi[] = "scheduling.k8s.io/v1beta1";
inline constexpr char kKubernetesSchedulingApiV1Alpha2[] = "scheduling.k8s.io/v1alpha2";
inline constexpr char kWorkersTemplate[] = "workers";
// `api`: the scheduling.k8s.io version for podGroup Kubernetes (OperatorSettings).
std::optional<json> PodGroup(const api::CoordinatedJob& job,
                             const std::string& api = kKubernetesSchedulingApi);
std::optional<json> KubernetesWorkload(const api::CoordinatedJob& job,
                                       const std::string& api = kKubernetesSchedulingApi);
void JoinPodGroup(const api::CoordinatedJob& job, json* pod);

// What a gang is made from: a hash of spec fields that shape the pods and the coordinator's
// configuration (all but failurePolicy, successPolicy, activeDeadlineSeconds,
// ttlSecondsAfterFinished and suspend, which take effect as they are). Each gang's pods and
// the coordinator's ConfigMap carry it (kSpecHashAnnotation); a gang made from another spec is
// replaced by a new one (spec_change.cc). CoordinatorConfigMap, CoordinatorPod and WorkerPod
// (so DriverPod) stamp it.
inline constexpr char kSpecHashAnnotation[] = "cohort.dev/spec-hash";
std::string SpecHash(const api::CoordinatedJob& job);
// Marks an object made for the job with SpecHash.
void StampSpecHash(const std::string& hash, json* object);

}  // namespace cohort::controller
