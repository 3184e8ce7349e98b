#include "service/core/service_config.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace cohort {

absl::Status ValidateConfig(const ServiceConfig& config) {
  if (config.jobs.empty()) {
    return absl::InvalidArgumentError("no jobs configured: give at least one --job NAME=COUNT");
  }
  absl::flat_hash_map<std::string, int> seen;
  int workload_jobs = 0;
  for (const JobConfig& job : config.jobs) {
    if (job.name.empty()) return absl::InvalidArgumentError("a job has an empty name");
    if (job.num_tasks <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("job \"", job.name, "\" has ", job.num_tasks, " tasks; need at least 1"));
    }
    if (job.num_tasks > kMaxTasksPerJob) {
      return absl::InvalidArgumentError(absl::StrCat("job \"", job.name, "\" has ", job.num_tasks,
                                                     " tasks; at most ", kMaxTasksPerJob,
                                                     " tasks per job are supported"));
    }
    if (seen[job.name]++) {
      return absl::InvalidArgumentError(absl::StrCat("job \"", job.name, "\" is declared twice"));
    }
    if (!job.auxiliary) ++workload_jobs;
  }
  if (workload_jobs == 0) {
    return absl::InvalidArgumentError("every job is auxiliary; declare one workload job");
  }
  if (!config.default_job.empty() && !seen.count(config.default_job)) {
    return absl::InvalidArgumentError(
        absl::StrCat("default job \"", config.default_job, "\" is not a declared job"));
  }
  if (config.default_job.empty() && workload_jobs > 1) {
    return absl::InvalidArgumentError(
        "several workload jobs are declared; name the one that requests without a job name "
        "go to (--default-job)");
  }
  if (config.heartbeat_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("heartbeat timeout must be positive");
  }
  if (config.register_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("register timeout must be positive");
  }
  if (config.shutdown_barrier_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("shutdown barrier timeout must not be negative");
  }
  if (config.barriers.max_id_bytes == 0 || config.barriers.max_open == 0 ||
      config.barriers.max_finished == 0) {
    return absl::InvalidArgumentError(
        "--max-barrier-id-bytes, --max-open-barriers and --max-finished-barriers must be at "
        "least 1");
  }
  if (config.barriers.finished_retention <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--finished-barrier-retention must be positive: a repeated call needs the result kept");
  }
  return absl::OkStatus();
}

}  // namespace cohort
