// What the plan's tests build their inputs from: a CoordinatedJob "train" of ml, its pods as
// the plan observes them, and readers of a plan. Shared by the tests of operator/plan.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "operator/plan/job_plan.h"
#include "operator/plan/policies.h"

namespace cohort::controller {

using json = nlohmann::json;
namespace phase = api::phase;

inline const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

inline api::CoordinatedJob Job(int replicas = 3, const std::string& status_phase = "",
                               int restarts = 0) {
  json object = {
      {"apiVersion", "cohort.dev/v1alpha1"},
      {"kind", "CoordinatedJob"},
      {"metadata", {{"name", "train"}, {"namespace", "ml"}, {"uid", "u1"}, {"generation", 2}}},
      {"spec",
       {{"replicas", replicas},
        {"template",
         {{"spec",
           {{"containers",
             json::array({{{"name", "worker"}, {"image", "example/train:1"}}})}}}}}}}};
  if (!status_phase.empty()) {
    object["status"] = {{"phase", status_phase},
                        {"restarts", restarts},
                        {"startTime", api::FormatRfc3339(kNow - absl::Minutes(1))}};
  }
  auto job = api::ParseCoordinatedJob(object);
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

inline ObservedPod Coordinator(int restart = 0, bool ready = true) {
  ObservedPod p;
  p.name = "train-coordinator";
  p.role = "coordinator";
  p.restart = restart;
  p.phase = "Running";
  p.ready = ready;
  p.pod_ip = "10.0.0.2";
  return p;
}

inline ObservedPod Worker(int index, int restart = 0, const std::string& pod_phase = "Running") {
  ObservedPod p;
  p.name = "train-worker-" + std::to_string(index);
  p.role = "worker";
  p.index = index;
  p.restart = restart;
  p.phase = pod_phase;
  p.ready = pod_phase == "Running";
  return p;
}

inline ObservedPod Exited(int index, int code, absl::Time at = kNow - absl::Seconds(5),
                          int restart = 0) {
  ObservedPod p = Worker(index, restart, code == 0 ? "Succeeded" : "Failed");
  p.ready = false;
  p.exit_code = code;
  p.finished_at = at;
  return p;
}

inline OperatorSettings Settings() { return OperatorSettings{}; }

inline Observed Everything(std::vector<ObservedPod> pods) {
  Observed o;
  o.pods = std::move(pods);
  o.token_secret = o.coordinator_config_map = o.coordinator_service = o.workers_service = true;
  o.network_policy = NetworkPolicy(Job(), Settings());  // as the API server returns it
  (*o.network_policy)["metadata"]["resourceVersion"] = "7";
  o.now = kNow;
  return o;
}

inline std::vector<std::string> Names(const std::vector<json>& objects) {
  std::vector<std::string> out;
  for (const auto& o : objects)
    out.push_back(o["kind"].get<std::string>() + "/" + o["metadata"]["name"].get<std::string>());
  return out;
}

inline std::vector<std::string> Sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

inline const api::Condition* Cond(const Plan& plan, const char* type) {
  return api::FindCondition(plan.status.conditions, type);
}

inline api::CoordinatedJob WithState(api::CoordinatedJob job, api::StateVolume volume) {
  job.spec.coordinator.state.volume = volume;
  return job;
}

// The coordinator pod "c1" the status already knows, with its container restarted `count`
// times, the last exit at `exited`.
inline ObservedPod KnownCoordinator(int count = 0, absl::Time exited = kNow - absl::Seconds(5)) {
  ObservedPod p = Coordinator();
  p.uid = "c1";
  p.restarts_in_place = true;
  p.restart_count = count;
  if (count > 0) p.last_exit_at = exited;
  return p;
}

inline api::CoordinatedJob Known(api::CoordinatedJob job, int counted = 0) {
  job.status.coordinator_pod.uid = "c1";
  job.status.coordinator_pod.container_restarts = counted;
  return job;
}

inline std::vector<std::string> EventReasons(const Plan& plan) {
  std::vector<std::string> out;
  for (const auto& e : plan.events) out.push_back(e.reason);
  return out;
}

// One policy (policies.h) run on a job and what is observed of it: the plan it left, and
// whether it decided the plan.
struct PolicyOutcome {
  Plan plan;
  bool decided = false;
};
template <typename Policy>
PolicyOutcome RunPolicy(const api::CoordinatedJob& job, const Observed& observed, Policy policy) {
  planning::Planner P{job, observed, Plan{}};
  P.plan.status = job.status;
  const bool decided = policy(P);
  return {std::move(P.plan), decided};
}

// The reason of a condition the plan set, "" if it set none.
inline std::string ReasonOf(const Plan& plan, const char* type) {
  const api::Condition* c = api::FindCondition(plan.status.conditions, type);
  return c ? c->reason : "";
}

}  // namespace cohort::controller
