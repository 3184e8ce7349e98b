// TaskIdentity: the workload's task a sidecar stands for, and the pod it runs in.
#pragma once

#include <string>

#include "absl/strings/str_cat.h"
#include "sidecar/gpu_metrics.h"

namespace cohort {

struct TaskIdentity {
  std::string workload_job = "worker";  // whose task this pod runs
  int task_id = 0;
  int num_tasks = 1;
  PodIdentity pod;
  std::string pod_ip;

  // "/job:worker/task:3 (pod train-worker-3)", for logs and reports.
  std::string Describe() const {
    // By hand (no POD_NAME) there is no pod to name.
    return absl::StrCat("/job:", workload_job, "/task:", task_id,
                        pod.pod.empty() ? "" : absl::StrCat(" (pod ", pod.pod, ")"));
  }
};

}  // namespace cohort
