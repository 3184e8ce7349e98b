#include "service/core/job_directory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "service/core/errors.h"

namespace cohort {

JobDirectory::JobDirectory(const std::vector<JobConfig>& jobs, const std::string& default_job)
    : jobs_(jobs) {
  auto workload = std::make_shared<std::vector<TaskName>>();
  for (const JobConfig& job : jobs_) {
    by_name_[job.name] = &job;
    if (default_job_.empty() && !job.auxiliary) default_job_ = job.name;
    if (job.auxiliary) continue;
    for (TaskName& task : TasksOf(job)) workload->push_back(std::move(task));
  }
  if (!default_job.empty()) default_job_ = default_job;
  std::sort(workload->begin(), workload->end());
  workload_ = std::move(workload);
}

const JobConfig* JobDirectory::Find(const std::string& job) const {
  auto it = by_name_.find(job);
  return it == by_name_.end() ? nullptr : it->second;
}

absl::StatusOr<TaskName> JobDirectory::ResolveTask(const std::string& job, int32_t id) const {
  const std::string& name = job.empty() ? default_job_ : job;
  const JobConfig* config = Find(name);
  if (!config) {
    return ServiceError(absl::InvalidArgumentError(
        absl::StrCat("unknown job \"", name, "\"; this coordinator serves ",
                     absl::StrJoin(jobs_, ", ", [](std::string* out, const JobConfig& j) {
                       absl::StrAppend(out, j.name, " (", Plural(j.num_tasks, "task"), ")");
                     }))));
  }
  if (id < 0 || id >= config->num_tasks) {
    return ServiceError(absl::InvalidArgumentError(
        absl::StrCat("task id ", id, " is out of range for job \"", name, "\", which has ",
                     Plural(config->num_tasks, "task"), " (ids 0..", config->num_tasks - 1, ")")));
  }
  return TaskName{name, id};
}

bool JobDirectory::IsAuxiliary(const std::string& job) const {
  const JobConfig* config = Find(job);
  return config && config->auxiliary;
}

std::vector<TaskName> JobDirectory::TasksOf(const JobConfig& job) {
  std::vector<TaskName> tasks;
  for (int32_t i = 0; i < job.num_tasks; ++i) tasks.push_back({job.name, i});
  return tasks;
}

}  // namespace cohort
