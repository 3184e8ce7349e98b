#include "operator/controller/job_controller.h"

#include <algorithm>
#include <cstring>
#include <future>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "operator/controller/observe.h"
#include "operator/kube/leader_election.h"
#include "operator/plan/kueue.h"
#include "operator/plan/state_volume.h"
#include "spdlog/spdlog.h"

namespace cohort::controller {
namespace {

std::pair<std::string, std::string> SplitKey(const std::string& key) {
  auto slash = key.find('/');
  return {key.substr(0, slash), key.substr(slash + 1)};
}

const kube::Resource& ResourceFor(const json& object) {
  const std::string kind = object.value("kind", "");
  if (kind == "Service") return kube::kServices;
  if (kind == "ConfigMap") return kube::kConfigMaps;
  if (kind == "PersistentVolumeClaim") return kube::kPersistentVolumeClaims;
  if (kind == "Secret") return kube::kSecrets;
  if (kind == "NetworkPolicy") return kube::kNetworkPolicies;
  if (kind == "Certificate") return kube::kCertificates;
  const std::string api = object.value("apiVersion", "");
  const bool v1alpha2 = api == kKubernetesSchedulingApiV1Alpha2;
  if (kind == "Workload") {
    if (absl::StartsWith(api, "scheduling.k8s.io/")) {
      return v1alpha2 ? kube::kKubernetesWorkloadsV1Alpha2 : kube::kKubernetesWorkloads;
    }
    return kube::kWorkloads;
  }
  if (kind == "PodGroup") {
    if (absl::StartsWith(api, "scheduling.k8s.io/")) {
      return v1alpha2 ? kube::kKubernetesPodGroupsV1Alpha2 : kube::kKubernetesPodGroups;
    }
    return api == "scheduling.volcano.sh/v1beta1" ? kube::kVolcanoPodGroups
                                                  : kube::kSchedulerPluginsPodGroups;
  }
  return kube::kPods;
}

// A create the API server refuses for what the object is: invalid, or a pod the namespace's
// Pod Security level refuses. No retry will change that.
bool IsRefusal(const absl::Status& status) {
  return absl::IsInvalidArgument(status) ||
         (absl::IsPermissionDenied(status) &&
          absl::StrContains(status.message(), "violates PodSecurity"));
}

// A failed create, saying what to install when the object's API is not served.
absl::Status ExplainCreateError(const json& object, const absl::Status& status) {
  if (!absl::IsNotFound(status)) return status;
  const std::string kind = object.value("kind", "");
  if ((kind == "PodGroup" || kind == "Workload") &&
      absl::StartsWith(object.value("apiVersion", ""), "scheduling.k8s.io/")) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create ", kind, " ", kube::Name(object), " (spec.gangScheduling.podGroup ",
        "Kubernetes): ", object.value("apiVersion", ""),
        " is no longer served here (the GenericWorkload feature gate or the runtime config was "
        "turned off since the operator started?) (",
        status.message(), ")"));
  }
  if (kind == "PodGroup") {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create PodGroup ", kube::Name(object),
        " (spec.gangScheduling): ", object.value("apiVersion", ""),
        " is not served here; install the gang scheduler's CRDs (", status.message(), ")"));
  }
  if (kind == "Certificate") {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create Certificate ", kube::Name(object),
                     ": cert-manager's API (cert-manager.io/v1 certificates) is not served here; "
                     "install cert-manager or run the operator with --job-tls=operator (",
                     status.message(), ")"));
  }
  return status;
}

std::string Summarize(const std::vector<std::string>& names) {
  if (names.size() <= 4) return absl::StrJoin(names, ", ");
  return absl::StrCat(names.front(), " ... ", names.back());
}

}  // namespace

JobController::JobController(kube::Client* client, MetricsRegistry* metrics, Options options)
    : client_(client),
      options_(std::move(options)),
      clock_(options_.clock ? options_.clock : &real_clock_),
      queue_(absl::Milliseconds(100), absl::Seconds(60), clock_),
      watcher_(options_.coordinator_poll, [this](const std::string& key) { queue_.Add(key); }) {
  reconcile_duration_ = &metrics
                             ->AddHistogram("cohort_operator_reconcile_duration_seconds",
                                            "Time to reconcile one CoordinatedJob.", {},
                                            ExponentialBuckets(0.001, 2, 14))
                             .WithLabels({});
  reconcile_total_ = &metrics->AddCounter(
      "cohort_operator_reconcile_total",
      "Reconciles by result: success, error (retried with backoff), conflict (stale cache).",
      {"result"});
  watch_restarts_ = &metrics->AddCounter(
      "cohort_operator_watch_restarts_total",
      "Watches that ended in an error or an expired resourceVersion and were restarted.",
      {"resource"});
  queue_depth_ = &metrics
                      ->AddGauge("cohort_operator_queue_depth",
                                 "CoordinatedJob keys waiting to be reconciled.", {})
                      .WithLabels({});
  // Every series exists from the start, so rates and dashboards see 0 rather than nothing.
  for (const char* result : {"success", "error", "conflict"})
    reconcile_total_->WithLabels({result});
  for (const char* resource :
       {"coordinatedjobs", "pods", "services", "configmaps", "persistentvolumeclaims", "secrets",
        "networkpolicies", "workloads", "resourceflavors", "podgroups"}) {
    watch_restarts_->WithLabels({resource});
  }
  metrics->AddCollector([this] { return CollectJobMetrics(); });

  const auto watch_restart = [this](const char* resource) {
    return [this, resource](const std::string&) {
      watch_restarts_->WithLabels({resource}).Increment();
    };
  };
  kube::Informer::Options job_options;
  job_options.namespace_name = options_.namespace_name;
  jobs_ = std::make_unique<kube::Informer>(
      client_, kube::kCoordinatedJobs, job_options,
      kube::Informer::Handlers{
          [this](const json& o) { queue_.Add(JobKey(kube::Namespace(o), kube::Name(o))); },
          [this](const json& o) { queue_.Add(JobKey(kube::Namespace(o), kube::Name(o))); },
          watch_restart("coordinatedjobs")});
  // Children are cached only when the operator made them (the managed-by label).
  kube::Informer::Options child_options;
  child_options.namespace_name = options_.namespace_name;
  child_options.selector.label_selector = absl::StrCat(kManagedByLabel, "=", kManagedBy);
  child_options.index_label = kJobLabel;
  const auto child_handlers = [this, &watch_restart](const char* resource) {
    return kube::Informer::Handlers{[this](const json& o) { EnqueueOwner(o); },
                                    [this](const json& o) { EnqueueOwner(o); },
                                    watch_restart(resource)};
  };
  pods_ =
      std::make_unique<kube::Informer>(client_, kube::kPods, child_options, child_handlers("pods"));
  services_ = std::make_unique<kube::Informer>(client_, kube::kServices, child_options,
                                               child_handlers("services"));
  config_maps_ = std::make_unique<kube::Informer>(client_, kube::kConfigMaps, child_options,
                                                  child_handlers("configmaps"));
  claims_ = std::make_unique<kube::Informer>(client_, kube::kPersistentVolumeClaims, child_options,
                                             child_handlers("persistentvolumeclaims"));
  // Only the operator's own (the label selector): the tokens it made.
  secrets_ = std::make_unique<kube::Informer>(client_, kube::kSecrets, child_options,
                                              child_handlers("secrets"));
  // Watched even with --network-policy=false, so that the policies made before are deleted.
  network_policies_ = std::make_unique<kube::Informer>(
      client_, kube::kNetworkPolicies, child_options, child_handlers("networkpolicies"));
}

JobController::~JobController() { Stop(); }

void JobController::EnqueueOwner(const json& child) {
  const std::string job = child.value(json::json_pointer("/metadata/labels/cohort.dev~1job"), "");
  if (!job.empty()) queue_.Add(JobKey(kube::Namespace(child), job));
}

std::vector<kube::Informer*> JobController::Informers() const {
  std::vector<kube::Informer*> all = {
      jobs_.get(),   pods_.get(),    services_.get(),        config_maps_.get(),
      claims_.get(), secrets_.get(), network_policies_.get()};
  if (workloads_) all.push_back(workloads_.get());
  if (flavors_) all.push_back(flavors_.get());
  if (pod_groups_) all.push_back(pod_groups_.get());
  return all;
}

absl::Status JobController::StartAndSync(const std::atomic<bool>& stop) {
  if (absl::Status s = DecideKueue(); !s.ok()) return s;
  DecideKubernetesGangScheduling();
  for (auto* informer : Informers()) informer->Start();
  for (auto* informer : Informers()) {
    if (!informer->WaitForSync(stop)) return absl::CancelledError("stopped");
  }
  synced_ = true;
  spdlog::info(
      "caches synced: {} CoordinatedJobs, {} pods, {} services, {} config maps, {} claims, {} "
      "secrets, {} network policies{}",
      jobs_->Size(), pods_->Size(), services_->Size(), config_maps_->Size(), claims_->Size(),
      secrets_->Size(), network_policies_->Size(),
      workloads_ ? absl::StrCat(", ", workloads_->Size(), " Workloads, ", flavors_->Size(),
                                " ResourceFlavors")
                 : std::string());
  return absl::OkStatus();
}

void JobController::Run() {
  for (int i = 0; i < std::max(1, options_.workers); ++i) {
    threads_.emplace_back([this] {
      while (auto key = queue_.Get()) {
        const absl::Time start = absl::Now();
        absl::Status s = Reconcile(*key);
        reconcile_duration_->Observe(absl::ToDoubleSeconds(absl::Now() - start));
        if (s.ok()) {
          reconcile_total_->WithLabels({"success"}).Increment();
          queue_.Forget(*key);
        } else if (absl::IsAborted(s)) {
          // Our cache was behind the API server; the watch event that follows requeues it.
          reconcile_total_->WithLabels({"conflict"}).Increment();
          spdlog::debug("reconcile {}: {}", *key, s.ToString());
          queue_.AddRateLimited(*key);
        } else {
          reconcile_total_->WithLabels({"error"}).Increment();
          spdlog::warn("reconcile {}: {} (retry {} with backoff)", *key, s.ToString(),
                       queue_.Failures(*key) + 1);
          queue_.AddRateLimited(*key);
        }
        queue_.Done(*key);
      }
    });
  }
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void JobController::StopWorkers() { queue_.ShutDown(); }

void JobController::Stop() {
  queue_.ShutDown();
  watcher_.StopAll();
  for (auto* informer : Informers()) {
    if (informer) informer->Stop();
  }
}

absl::Status JobController::Reconcile(const std::string& key) {
  const auto [ns, name] = SplitKey(key);
  auto object = jobs_->Get(ns, name);
  if (!object) {
    // Deleted: its children go with it (owner references); forget what we kept.
    watcher_.Unwatch(key);
    {
      absl::MutexLock lock(&failures_mu_);
      failure_seen_.erase(key);
    }
    ReleaseWorkloads(ns, name);
    return absl::OkStatus();
  }
  if (object->contains("/metadata/deletionTimestamp"_json_pointer)) return absl::OkStatus();
  auto job = api::ParseCoordinatedJob(*object);
  if (!job.ok()) return FailInvalid(*object, std::string(job.status().message()));
  // volume Auto: where the coordinator's state goes, chosen once (the cluster's StorageClasses
  // are read only then) and kept in the status; everything below sees the volume chosen.
  std::optional<StateVolumeChoice> state_choice;
  if (job->spec.coordinator.state.volume_auto) {
    absl::StatusOr<json> classes = json::object();
    if (!api::ParseStateVolumeName(job->status.state_volume)) {
      classes = client_->List(kube::kStorageClasses, "", {});
    }
    auto choice = ChooseStateVolume(*job, classes);
    if (!choice.ok()) return choice.status();
    job->spec.coordinator.state.volume = choice->volume;
    if (choice->fresh) state_choice = std::move(*choice);
  }

  auto observation = Observe(*job, Caches(), options_.settings, clock_->Now(),
                             [this, &job] { return ReadPriority(*job); });
  if (!observation.ok()) return observation.status();
  Observed& observed = observation->observed;
  WatchCoordinator(key, *job, observation->credentials, &observed);
  const int gang = job->status.Gang();
  RecallFailure(key, gang, &observed);

  Plan plan = PlanJob(*job, observed, options_.settings);
  plan.status.state_volume = api::StateVolumeName(job->spec.coordinator.state.volume);
  if (state_choice) {
    spdlog::info("CoordinatedJob {}: {}", key, state_choice->message);
    plan.events.push_back(
        {state_choice->warning ? "Warning" : "Normal", "StateVolume", state_choice->message});
  }
  RememberFailure(key, gang, observed, plan);
  absl::Status applied = Apply(*job, plan);
  if (!applied.ok()) return applied;
  if (plan.requeue_after) queue_.AddAfter(key, *plan.requeue_after);
  return absl::OkStatus();
}

void JobController::DecideKubernetesGangScheduling() {
  kube::ListOptions one;
  one.limit = 1;
  std::string why;
  for (const kube::Resource* groups :
       {&kube::kKubernetesPodGroups, &kube::kKubernetesPodGroupsV1Alpha2}) {
    auto probe = client_->List(*groups, options_.namespace_name, one);
    if (!probe.ok()) {
      if (why.empty()) why = std::string(probe.status().message());
      continue;
    }
    options_.settings.kubernetes_scheduling_api = groups->api_path.substr(strlen("/apis/"));
    kube::Informer::Options group_options;
    group_options.namespace_name = options_.namespace_name;
    group_options.selector.label_selector = absl::StrCat(kManagedByLabel, "=", kManagedBy);
    group_options.index_label = kJobLabel;
    pod_groups_ = std::make_unique<kube::Informer>(
        client_, *groups, group_options,
        kube::Informer::Handlers{[this](const json& o) { EnqueueOwner(o); },
                                 [this](const json& o) { EnqueueOwner(o); },
                                 [this](const std::string&) {
                                   watch_restarts_->WithLabels({"podgroups"}).Increment();
                                 }});
    spdlog::info(
        "gang scheduling by the kube-scheduler: {} Workload and PodGroup served (jobs "
        "with spec.gangScheduling.podGroup Kubernetes)",
        options_.settings.kubernetes_scheduling_api);
    return;
  }
  spdlog::info(
      "gang scheduling by the kube-scheduler: not served here (scheduling.k8s.io/v1beta1 or "
      "v1alpha2 PodGroups: {}); jobs with spec.gangScheduling.podGroup Kubernetes fail, saying "
      "so",
      why);
}

JobCaches JobController::Caches() const {
  JobCaches caches;
  caches.pods = pods_.get();
  caches.services = services_.get();
  caches.config_maps = config_maps_.get();
  caches.claims = claims_.get();
  caches.secrets = secrets_.get();
  caches.network_policies = network_policies_.get();
  caches.workloads = workloads_.get();
  caches.flavors = flavors_.get();
  caches.pod_groups = pod_groups_.get();
  return caches;
}

void JobController::WatchCoordinator(const std::string& key, const api::CoordinatedJob& job,
                                     const CoordinatorCredentials& credentials,
                                     Observed* observed) {
  const int gang = job.status.Gang();
  const ObservedPod* coordinator = GangCoordinator(job, observed->pods);
  const bool active = job.status.phase != api::phase::kSucceeded &&
                      job.status.phase != api::phase::kFailed && !job.spec.suspend;
  if (!active || !coordinator || coordinator->terminating || coordinator->phase != "Running" ||
      coordinator->pod_ip.empty()) {
    watcher_.Unwatch(key);
    return;
  }
  const std::string host = coordinator->pod_ip.find(':') == std::string::npos
                               ? coordinator->pod_ip
                               : absl::StrCat("[", coordinator->pod_ip, "]");
  watcher_.Watch(key, absl::StrCat(host, ":", kCoordinatorGrpcPort), gang, credentials,
                 job.spec.tasks.has_value());
  observed->coordinator = watcher_.View(key, gang);
}

void JobController::RecallFailure(const std::string& key, int gang, Observed* observed) {
  absl::MutexLock lock(&failures_mu_);
  auto it = failure_seen_.find(key);
  if (it != failure_seen_.end() && it->second.gang == gang) {
    observed->failure_first_seen = it->second.first;
    observed->failure_reasons = it->second.reasons;
  }
}

void JobController::RememberFailure(const std::string& key, int gang, const Observed& observed,
                                    const Plan& plan) {
  absl::MutexLock lock(&failures_mu_);
  if (!plan.failure_seen || plan.status.Gang() != gang) {
    failure_seen_.erase(key);
    return;
  }
  FailureSeen& seen = failure_seen_[key];
  if (!observed.failure_first_seen) seen = FailureSeen{gang, observed.now, {}};
  for (const std::string& r : plan.failure_reasons) {
    if (std::find(seen.reasons.begin(), seen.reasons.end(), r) == seen.reasons.end()) {
      seen.reasons.push_back(r);
    }
  }
}

absl::Status JobController::WriteStatus(const api::CoordinatedJob& job,
                                        const api::JobStatus& status) {
  json object = job.object;
  object["status"] = api::StatusToJson(status);
  auto updated =
      client_->Replace(kube::kCoordinatedJobs, job.namespace_name, job.name, object, "status");
  if (!updated.ok()) return updated.status();
  (*updated)["kind"] = api::kKind;
  jobs_->Upsert(*updated);
  return absl::OkStatus();
}

absl::Status JobController::FailInvalid(const json& object, const std::string& message) {
  if (object.value("/status/phase"_json_pointer, "") == api::phase::kFailed) {
    return absl::OkStatus();
  }
  json updated = object;
  const std::string now = api::FormatRfc3339(clock_->Now());
  const int64_t generation = object.value("/metadata/generation"_json_pointer, int64_t{0});
  updated["status"] = {{"phase", api::phase::kFailed},
                       {"restarts", 0},
                       {"completionTime", now},
                       {"observedGeneration", generation},
                       {"conditions", json::array({{{"type", kConditionFailed},
                                                    {"status", "True"},
                                                    {"reason", "InvalidSpec"},
                                                    {"message", message},
                                                    {"lastTransitionTime", now},
                                                    {"observedGeneration", generation}}})}};
  auto written = client_->Replace(kube::kCoordinatedJobs, kube::Namespace(object),
                                  kube::Name(object), updated, "status");
  if (!written.ok()) return written.status();
  RecordEvent(object, "Warning", "InvalidSpec", message);
  spdlog::warn("CoordinatedJob {}/{} is invalid: {}", kube::Namespace(object), kube::Name(object),
               message);
  return absl::OkStatus();
}

absl::Status JobController::Apply(const api::CoordinatedJob& job, const Plan& plan) {
  const std::string key = JobKey(job.namespace_name, job.name);
  // Status first: a restart is counted before its pods go, and a conflict stops here.
  if (plan.status != job.status) {
    if (absl::Status s = WriteStatus(job, plan.status); !s.ok()) return s;
    if (plan.status.phase != job.status.phase) {
      spdlog::info("CoordinatedJob {}: {} -> {}{}", key,
                   job.status.phase.empty() ? "new" : job.status.phase, plan.status.phase,
                   plan.status.Gang() != job.status.Gang()
                       ? absl::StrCat(" (gang ", plan.status.Gang(), ")")
                       : "");
    }
  }
  for (const auto& e : plan.events) RecordEvent(job.object, e.type, e.reason, e.message);

  // Deletes, then updates, then creates; the first error is returned once all were tried.
  absl::Status first_error = DeletePods(job, plan.delete_pods);
  const auto keep = [&first_error](const absl::Status& s) {
    if (!s.ok() && first_error.ok()) first_error = s;
  };
  keep(UpdateObjects(job, plan));
  std::string invalid;
  keep(CreateObjects(job, plan.create, &invalid));
  if (!invalid.empty()) {
    // The job's pod template cannot be run: no retry will change that.
    auto latest = jobs_->Get(job.namespace_name, job.name);
    return FailInvalid(latest ? *latest : job.object, invalid);
  }
  keep(ApplyWorkload(job, plan));
  if (plan.delete_job) {
    spdlog::info("CoordinatedJob {}: ttlSecondsAfterFinished passed; deleting it", key);
    kube::DeleteOptions options;
    options.propagation_policy = "Background";
    options.precondition_uid = job.uid;
    absl::Status s = client_->Delete(kube::kCoordinatedJobs, job.namespace_name, job.name, options);
    if (!absl::IsNotFound(s)) keep(s);
  }
  return first_error;
}

absl::Status JobController::DeletePods(const api::CoordinatedJob& job,
                                       const std::vector<std::string>& pods) {
  std::vector<std::future<absl::Status>> deletes;
  for (const auto& pod : pods) {
    deletes.push_back(std::async(std::launch::async, [this, &job, pod] {
      kube::DeleteOptions options;
      options.propagation_policy = "Background";
      absl::Status s = client_->Delete(kube::kPods, job.namespace_name, pod, options);
      return absl::IsNotFound(s) ? absl::OkStatus() : s;
    }));
  }
  absl::Status first_error;
  for (auto& f : deletes) {
    absl::Status s = f.get();
    if (!s.ok() && first_error.ok()) first_error = s;
  }
  if (!pods.empty()) {
    spdlog::info("CoordinatedJob {}/{}: deleting {} pod(s): {}", job.namespace_name, job.name,
                 pods.size(), Summarize(pods));
  }
  return first_error;
}

absl::Status JobController::UpdateObjects(const api::CoordinatedJob& job, const Plan& plan) {
  const std::string key = JobKey(job.namespace_name, job.name);
  absl::Status first_error;
  if (plan.delete_network_policy) {
    absl::Status s =
        client_->Delete(kube::kNetworkPolicies, job.namespace_name, NetworkPolicyName(job));
    if (!s.ok() && !absl::IsNotFound(s)) first_error = s;
    if (s.ok()) {
      spdlog::info("CoordinatedJob {}: deleted NetworkPolicy {} (--network-policy=false)", key,
                   NetworkPolicyName(job));
    }
  }
  for (const auto& object : plan.update) {
    auto result =
        client_->Replace(ResourceFor(object), job.namespace_name, kube::Name(object), object);
    if (!result.ok()) {
      if (first_error.ok()) first_error = result.status();
      continue;
    }
    json updated = *result;
    updated["kind"] = object.value("kind", "");
    if (updated["kind"] == "NetworkPolicy") {
      network_policies_->Upsert(updated);
      spdlog::warn("CoordinatedJob {}: {} {} differed from the operator's; wrote it back", key,
                   object.value("kind", ""), kube::Name(object));
    } else if (updated["kind"] == "ConfigMap") {
      config_maps_->Upsert(updated);
      spdlog::info("CoordinatedJob {}: ConfigMap {} written anew for the job's changed spec", key,
                   kube::Name(object));
    }
  }
  return first_error;
}

absl::Status JobController::CreateObjects(const api::CoordinatedJob& job,
                                          const std::vector<json>& create, std::string* invalid) {
  constexpr size_t kParallel = 16;
  // Everything else before the pods, which may name it (a PodGroup, a Secret they mount).
  std::vector<std::vector<const json*>> waves(2);
  for (const json& object : create) {
    waves[object.value("kind", "") == "Pod" ? 1 : 0].push_back(&object);
  }
  std::vector<std::vector<const json*>> batches;
  for (const auto& wave : waves) {
    for (size_t begin = 0; begin < wave.size(); begin += kParallel) {
      batches.emplace_back(
          wave.begin() + static_cast<std::ptrdiff_t>(begin),
          wave.begin() + static_cast<std::ptrdiff_t>(std::min(wave.size(), begin + kParallel)));
    }
  }
  absl::Status first_error;
  std::vector<std::string> created_pods;
  for (const auto& objects : batches) {
    std::vector<std::pair<const json*, std::future<absl::StatusOr<json>>>> batch;
    for (const json* object : objects) {
      batch.emplace_back(object, std::async(std::launch::async, [this, &job, object] {
                           return client_->Create(ResourceFor(*object), job.namespace_name,
                                                  *object);
                         }));
    }
    for (auto& [object, future] : batch) {
      auto result = future.get();
      if (result.ok()) {
        json created = *result;
        created["kind"] = object->value("kind", "");
        if (created["kind"] == "Pod") created_pods.push_back(kube::Name(created));
        CacheCreated(job, std::move(created));
      } else if (IsRefusal(result.status())) {
        if (invalid->empty()) {
          *invalid = absl::StrCat("the API server refused ", object->value("kind", ""), " ",
                                  kube::Name(*object), ": ", result.status().message());
        }
      } else if (!absl::IsAlreadyExists(result.status()) && first_error.ok()) {
        first_error = ExplainCreateError(*object, result.status());
      }
    }
  }
  if (!created_pods.empty()) {
    const std::string message =
        absl::StrCat("created ", created_pods.size(), " pod(s): ", Summarize(created_pods));
    spdlog::info("CoordinatedJob {}/{}: {}", job.namespace_name, job.name, message);
    RecordEvent(job.object, "Normal", "CreatedPods", message);
  }
  return first_error;
}

void JobController::CacheCreated(const api::CoordinatedJob& job, json created) {
  const std::string kind = created["kind"];
  const bool kubernetes_scheduling =
      absl::StartsWith(created.value("apiVersion", ""), "scheduling.k8s.io/");
  if (kind == "Pod") {
    pods_->Upsert(created);
  } else if (kind == "Service") {
    services_->Upsert(created);
  } else if (kind == "PersistentVolumeClaim") {
    claims_->Upsert(created);
  } else if (kind == "Secret") {
    secrets_->Upsert(created);
  } else if (kind == "NetworkPolicy") {
    network_policies_->Upsert(created);
  } else if (kind == "PodGroup" && pod_groups_ && kubernetes_scheduling) {
    pod_groups_->Upsert(created);
  } else if (kind == "Workload" && !kubernetes_scheduling) {
    if (workloads_) workloads_->Upsert(created);
    spdlog::info("CoordinatedJob {}/{}: created Workload {} (LocalQueue {})", job.namespace_name,
                 job.name, kube::Name(created), kueue::QueueName(job));
  } else if (kind == "Certificate" || kind == "PodGroup" || kind == "Workload") {
    // Not cached: cert-manager's Secret, once issued, is what the plan looks at; the
    // kube-scheduler reads a scheduling.k8s.io Workload's PodGroup, and so does the plan; a
    // gang scheduler's PodGroup is the scheduler's alone.
  } else {
    config_maps_->Upsert(created);
  }
}

void JobController::RecordEvent(const json& involved, const std::string& type,
                                const std::string& reason, const std::string& message) {
  const std::string ns = kube::Namespace(involved);
  json event = {{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"generateName", kube::Name(involved) + "."}, {"namespace", ns}}},
                {"involvedObject",
                 {{"apiVersion", api::kApiVersion},
                  {"kind", api::kKind},
                  {"name", kube::Name(involved)},
                  {"namespace", ns},
                  {"uid", kube::Uid(involved)}}},
                {"type", type},
                {"reason", reason},
                {"message", message.substr(0, 1024)},
                {"firstTimestamp", api::FormatRfc3339(clock_->Now())},
                {"lastTimestamp", api::FormatRfc3339(clock_->Now())},
                {"count", 1},
                {"source", {{"component", "cohort-operator"}}},
                {"reportingComponent", "cohort.dev/operator"},
                {"reportingInstance", options_.identity}};
  auto s = client_->Create(kube::kEvents, ns, event);
  if (!s.ok())
    spdlog::debug("event for {}/{}: {}", ns, kube::Name(involved), s.status().ToString());
}

}  // namespace cohort::controller
