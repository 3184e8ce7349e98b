// JobController's side of Kueue (kueue.h): whether to work with it, the Workloads' status and
// finalizer that plans ask for, and the finalizers of a deleted job's Workloads.
#include "absl/strings/str_cat.h"
#include "operator/controller/job_controller.h"
#include "operator/plan/kueue.h"
#include "spdlog/spdlog.h"

namespace cohort::controller {

absl::Status JobController::DecideKueue() {
  if (options_.kueue == "off") {
    spdlog::info("Kueue: off (--kueue=off); queue-name labels are ignored");
    return absl::OkStatus();
  }
  kube::ListOptions one;
  one.limit = 1;
  auto probe = client_->List(kube::kWorkloads, options_.namespace_name, one);
  if (!probe.ok()) {
    const std::string why =
        absl::StrCat("Kueue's API (", kube::kWorkloads.api_path, "/", kube::kWorkloads.plural,
                     ") is not usable: ", probe.status().message());
    if (options_.kueue == "on") {
      return absl::FailedPreconditionError(
          absl::StrCat(why, "; install Kueue (v0.16 or newer) or run with --kueue=auto or off"));
    }
    spdlog::info("Kueue: off (--kueue=auto): {}; queue-name labels are ignored", why);
    return absl::OkStatus();
  }
  kube::Informer::Options workload_options;
  workload_options.namespace_name = options_.namespace_name;
  workload_options.selector.label_selector = absl::StrCat(kManagedByLabel, "=", kManagedBy);
  workload_options.index_label = kJobLabel;
  workloads_ = std::make_unique<kube::Informer>(
      client_, kube::kWorkloads, workload_options,
      kube::Informer::Handlers{
          [this](const json& o) { EnqueueOwner(o); }, [this](const json& o) { EnqueueOwner(o); },
          [this](const std::string&) { watch_restarts_->WithLabels({"workloads"}).Increment(); }});
  // A flavor made or changed after a job's admission named it: the jobs waiting for it look
  // again after their requeue (kueue_plan.cc), so changes need no handler.
  flavors_ = std::make_unique<kube::Informer>(
      client_, kube::kResourceFlavors, kube::Informer::Options{},
      kube::Informer::Handlers{[](const json&) {}, [](const json&) {},
                               [this](const std::string&) {
                                 watch_restarts_->WithLabels({"resourceflavors"}).Increment();
                               }});
  kueue_ = true;
  spdlog::info("Kueue: on; jobs labelled {} wait for their Workload's admission",
               kueue::kQueueNameLabel);
  return absl::OkStatus();
}

absl::Status JobController::ApplyWorkload(const api::CoordinatedJob& job, const Plan& plan) {
  if (!workloads_) return absl::OkStatus();
  const std::string name = kueue::WorkloadName(job);
  const std::string key = JobKey(job.namespace_name, job.name);
  std::optional<json> current = workloads_->Get(job.namespace_name, name);
  if (plan.workload_status) {
    const bool had_admission = current && current->contains("/status/admission"_json_pointer);
    auto written = client_->Replace(kube::kWorkloads, job.namespace_name, name,
                                    *plan.workload_status, "status");
    if (!written.ok()) return written.status();
    (*written)["kind"] = "Workload";
    workloads_->Upsert(*written);
    current = *written;
    if (had_admission && !plan.workload_status->contains("/status/admission"_json_pointer)) {
      spdlog::info("CoordinatedJob {}: Workload {}: its pods are gone; its quota is given back",
                   key, name);
    }
  }
  if (plan.release_workload && current) {
    json released = *current;
    if (kueue::DropFinalizer(&released)) {
      auto written = client_->Replace(kube::kWorkloads, job.namespace_name, name, released);
      if (!written.ok() && !absl::IsNotFound(written.status())) return written.status();
      if (written.ok()) {
        (*written)["kind"] = "Workload";
        workloads_->Upsert(*written);
      }
    }
  }
  if (plan.delete_workload) {
    kube::DeleteOptions options;
    options.propagation_policy = "Background";
    absl::Status s = client_->Delete(kube::kWorkloads, job.namespace_name, name, options);
    if (!s.ok() && !absl::IsNotFound(s)) return s;
    spdlog::info("CoordinatedJob {}: deleted Workload {}: it no longer describes the job", key,
                 name);
  }
  return absl::OkStatus();
}

KueueObserved::Priority JobController::ReadPriority(const api::CoordinatedJob& job) {
  const kueue::PriorityClassSource source = kueue::PrioritySourceOf(job);
  std::optional<json> found;
  if (source.kind == kueue::PriorityClassSource::kGlobalDefault) {
    auto classes = client_->List(kube::kPriorityClasses, "", {});
    if (!classes.ok()) {
      spdlog::warn(
          "CoordinatedJob {}/{}: cannot list PriorityClasses for its Workload's "
          "priority: {}; priority 0",
          job.namespace_name, job.name, classes.status().ToString());
      return {};
    }
    // Kueue, as the API server: the lowest of the globalDefault classes.
    for (const json& c : classes->value("items", json::array())) {
      if (!c.value("globalDefault", false)) continue;
      if (!found || c.value("value", 0) < found->value("value", 0)) found = c;
    }
  } else {
    const kube::Resource& r = source.kind == kueue::PriorityClassSource::kWorkloadPriorityClass
                                  ? kube::kWorkloadPriorityClasses
                                  : kube::kPriorityClasses;
    auto got = client_->Get(r, "", source.name);
    if (got.ok()) {
      found = *got;
    } else if (!absl::IsNotFound(got.status())) {
      KueueObserved::Priority unreadable;
      unreadable.error =
          absl::StrCat(r.kind, " ", source.name, " cannot be read: ", got.status().message());
      return unreadable;
    }
  }
  return kueue::PriorityFrom(source, found);
}

void JobController::ReleaseWorkloads(const std::string& ns, const std::string& job) {
  if (!workloads_) return;
  for (json workload : workloads_->ByIndex(ns, job)) {
    if (!kueue::DropFinalizer(&workload)) continue;
    auto written = client_->Replace(kube::kWorkloads, ns, kube::Name(workload), workload);
    if (!written.ok() && !absl::IsNotFound(written.status())) {
      spdlog::warn("Workload {}/{} of deleted CoordinatedJob {}: {}", ns, kube::Name(workload), job,
                   written.status().ToString());
      queue_.AddRateLimited(JobKey(ns, job));
    }
  }
}

}  // namespace cohort::controller
