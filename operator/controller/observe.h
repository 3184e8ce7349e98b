// What the controller reads of a job's world for its plan (plan/observed.h): the job's pods and
// children from the informers' caches, Kueue's objects, and the job's credentials, with a fresh
// token and certificates where the job has none yet (the plan has no randomness of its own).
// The coordinator's view and the failure being settled are the controller's to add: they come
// from its coordinator watches and its memory, not from the caches.
#pragma once

#include <functional>

#include "absl/status/statusor.h"
#include "operator/controller/coordinator_watcher.h"
#include "operator/kube/informer.h"
#include "operator/plan/children.h"
#include "operator/plan/observed.h"

namespace cohort::controller {

// The informers' caches a job's children are read from (indexed by the job label).
struct JobCaches {
  kube::Informer* pods = nullptr;
  kube::Informer* services = nullptr;
  kube::Informer* config_maps = nullptr;
  kube::Informer* claims = nullptr;
  kube::Informer* secrets = nullptr;
  kube::Informer* network_policies = nullptr;
  // With Kueue only (nullptr without): the operator's Workloads, and every ResourceFlavor.
  kube::Informer* workloads = nullptr;
  kube::Informer* flavors = nullptr;
  // Where the API server serves Kubernetes' own PodGroups: the operator's (nullptr: none).
  kube::Informer* pod_groups = nullptr;
};

struct Observation {
  Observed observed;
  // What the operator dials the job's coordinator with (from the job's Secrets).
  CoordinatorCredentials credentials;
};

// Reads `job`'s world at `now`. `priority` reads a queued job's Workload priority from the API
// server; it is called only for a queued job that has no Workload yet. An error: a token or
// certificates the job needs could not be made.
absl::StatusOr<Observation> Observe(const api::CoordinatedJob& job, const JobCaches& caches,
                                    const OperatorSettings& settings, absl::Time now,
                                    const std::function<KueueObserved::Priority()>& priority);

// A job's token: 32 bytes from the kernel's CSPRNG, as hex text (a header value carries it as
// is).
absl::StatusOr<std::string> NewJobToken();

}  // namespace cohort::controller
