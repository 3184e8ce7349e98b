// The reconcile loop: informers for CoordinatedJobs and their pods, services, config maps,
// persistent volume claims, token secrets and network policies feed a work queue of job keys;
// each reconcile gathers what exists, asks PlanJob what should, writes the status first
// (conditional on resourceVersion, so two decisions can never both count a restart), then
// creates, updates and deletes children and records Events.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "operator/controller/coordinator_watcher.h"
#include "operator/controller/observe.h"
#include "operator/controller/work_queue.h"
#include "operator/kube/informer.h"
#include "operator/kube/kube_client.h"
#include "operator/plan/job_plan.h"

namespace cohort::controller {

// "<namespace>/<name>": a job's key in the work queue.
inline std::string JobKey(const std::string& ns, const std::string& name) {
  return ns + "/" + name;
}

class JobController {
 public:
  struct Options {
    std::string namespace_name;  // "" for every namespace
    int workers = 4;             // keys reconciled in parallel
    OperatorSettings settings;
    absl::Duration coordinator_poll = absl::Milliseconds(500);
    std::string identity = "cohort-operator";  // Events' reportingInstance
    // Kueue (kueue.h): "on" (its API must be served), "off" (queue-name labels are ignored)
    // or "auto" (on when the API server serves kueue.x-k8s.io/v1beta2 Workloads at start).
    std::string kueue = "auto";
    // The time the plans see, Events carry and the work queue delays by (nullptr: the real
    // clock).
    const Clock* clock = nullptr;
  };

  JobController(kube::Client* client, MetricsRegistry* metrics, Options options);
  ~JobController();
  JobController(const JobController&) = delete;
  JobController& operator=(const JobController&) = delete;

  // Starts the informers and returns once their first lists are cached: Cancelled when `stop`
  // came first, FailedPrecondition when Options::kueue is "on" and Kueue's API is not served.
  absl::Status StartAndSync(const std::atomic<bool>& stop);
  // Reconciles with `workers` threads until StopWorkers() or Stop().
  void Run();
  // Ends Run() once the reconciles in progress finish; informers keep running.
  void StopWorkers();
  // Everything: workers, coordinator watches, informers (shut the client down first, so
  // watches in progress end).
  void Stop();
  bool synced() const { return synced_.load(); }
  // Whether the controller works with Kueue (known once StartAndSync has begun).
  bool kueue() const { return kueue_.load(); }

  // One reconcile of `key` on the caller's thread, as a worker would run it (tests drive the
  // loop with this, with a FakeClient and a ManualClock), and the queue it feeds.
  absl::Status ReconcileNow(const std::string& key) { return Reconcile(key); }
  WorkQueue& queue() { return queue_; }

 private:
  absl::Status Reconcile(const std::string& key);
  JobCaches Caches() const;
  // Follows the current gang's coordinator while the job is active and its pod runs, and puts
  // its latest view into `observed`; stops following it otherwise.
  void WatchCoordinator(const std::string& key, const api::CoordinatedJob& job,
                        const CoordinatorCredentials& credentials, Observed* observed);
  // The failure being settled for `gang` (failure_seen_) into `observed`; and after the plan,
  // what it saw of one kept (or forgotten once the plan sees none, or a new gang starts).
  void RecallFailure(const std::string& key, int gang, Observed* observed);
  void RememberFailure(const std::string& key, int gang, const Observed& observed,
                       const Plan& plan);
  absl::Status Apply(const api::CoordinatedJob& job, const Plan& plan);
  // Apply's steps, each trying everything and returning the first error: pods deleted; the
  // NetworkPolicy deleted and objects written back; objects created (the rest before pods, 16
  // at a time), a refused one named in `invalid`; and a created object put in its cache.
  absl::Status DeletePods(const api::CoordinatedJob& job, const std::vector<std::string>& pods);
  absl::Status UpdateObjects(const api::CoordinatedJob& job, const Plan& plan);
  absl::Status CreateObjects(const api::CoordinatedJob& job, const std::vector<json>& create,
                             std::string* invalid);
  void CacheCreated(const api::CoordinatedJob& job, json created);
  absl::Status WriteStatus(const api::CoordinatedJob& job, const api::JobStatus& status);
  absl::Status FailInvalid(const json& object, const std::string& message);
  // Kueue: whether to work with it (Options::kueue, and the API server); the Workload's status
  // and finalizer from a plan; the finalizers of a deleted job's Workloads.
  absl::Status DecideKueue();
  // Kubernetes' own gang scheduling: which version of scheduling.k8s.io Workload and PodGroup
  // the API server serves (OperatorSettings::kubernetes_scheduling_api), and the operator's
  // PodGroups watched there; none served: jobs that ask for it fail, saying why.
  void DecideKubernetesGangScheduling();
  absl::Status ApplyWorkload(const api::CoordinatedJob& job, const Plan& plan);
  // The priority a queued job's new Workload gets (kueue::PrioritySourceOf), read from the
  // API server: a WorkloadPriorityClass, a PriorityClass, or the globalDefault one.
  KueueObserved::Priority ReadPriority(const api::CoordinatedJob& job);
  void ReleaseWorkloads(const std::string& ns, const std::string& job);
  std::vector<kube::Informer*> Informers() const;
  void RecordEvent(const json& involved, const std::string& type, const std::string& reason,
                   const std::string& message);
  void EnqueueOwner(const json& child);
  std::vector<CollectedFamily> CollectJobMetrics() const;

  kube::Client* client_;
  Options options_;
  RealClock real_clock_;
  const Clock* clock_;
  WorkQueue queue_;
  CoordinatorWatcher watcher_;
  std::unique_ptr<kube::Informer> jobs_, pods_, services_, config_maps_, claims_, secrets_,
      network_policies_;
  // With Kueue only: the operator's Workloads, and every ResourceFlavor.
  std::unique_ptr<kube::Informer> workloads_, flavors_;
  // Where the API server serves scheduling.k8s.io PodGroups: the operator's.
  std::unique_ptr<kube::Informer> pod_groups_;
  std::atomic<bool> kueue_{false};
  std::atomic<bool> synced_{false};
  std::vector<std::thread> threads_;

  absl::Mutex failures_mu_;
  // A failure being settled, per job key: its gang, when it was first seen, and the failure
  // reasons seen since (a pod's eviction is only visible while the pod is still there).
  struct FailureSeen {
    int gang = 0;
    absl::Time first;
    std::vector<std::string> reasons;
  };
  std::map<std::string, FailureSeen> failure_seen_;

  Histogram* reconcile_duration_;
  Family<Counter>* reconcile_total_;
  Family<Counter>* watch_restarts_;
  Gauge* queue_depth_;
};

}  // namespace cohort::controller
