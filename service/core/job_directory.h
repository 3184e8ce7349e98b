#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "service/core/service_config.h"
#include "service/core/task_name.h"

namespace cohort {

// The declared jobs and their tasks. Fixed at construction, so protocol adapters resolve
// task names without taking the service's lock.
class JobDirectory {
 public:
  // Keeps pointers into `jobs`, which must outlive the directory.
  JobDirectory(const std::vector<JobConfig>& jobs, const std::string& default_job);

  const JobConfig* Find(const std::string& job) const;
  // A task of a declared job; an empty job name means the default job.
  absl::StatusOr<TaskName> ResolveTask(const std::string& job, int32_t id) const;
  bool IsAuxiliary(const std::string& job) const;
  const std::string& default_job() const { return default_job_; }
  const std::vector<JobConfig>& jobs() const { return jobs_; }

  // Every workload task, sorted. One shared list, so that barriers compare it cheaply.
  const std::shared_ptr<const std::vector<TaskName>>& workload() const { return workload_; }
  // The tasks of `job`, in id order.
  static std::vector<TaskName> TasksOf(const JobConfig& job);

 private:
  const std::vector<JobConfig>& jobs_;
  absl::flat_hash_map<std::string, const JobConfig*> by_name_;
  std::string default_job_;
  std::shared_ptr<const std::vector<TaskName>> workload_;
};

}  // namespace cohort
