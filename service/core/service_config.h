#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "service/core/barrier_table.h"
#include "service/core/key_value_store.h"
#include "service/core/parked_call.h"

namespace cohort {

// A job's tasks are named in memory, in state records and in errors: far above any real
// job, low enough that a typo in --job cannot take the coordinator's memory.
inline constexpr int32_t kMaxTasksPerJob = 1 << 17;

struct JobConfig {
  std::string name;
  int32_t num_tasks = 0;
  // Sidecars: left out of every "all tasks" set; their errors still reach everyone.
  bool auxiliary = false;
  // Its tasks may come back with a new incarnation after an error, which then does not
  // propagate to the other tasks.
  bool recoverable = false;
};

struct ServiceConfig {
  std::vector<JobConfig> jobs;
  // Where requests without a job name go (every xla.* request). Empty: the only workload job.
  std::string default_job;
  // Clients heartbeat every half of their own timeout (jaxlib: 100 s); keep this >= theirs.
  absl::Duration heartbeat_timeout = absl::Seconds(100);
  absl::Duration register_timeout = absl::Minutes(5);
  // Zero turns the shutdown barrier off: ShutdownTask returns at once.
  absl::Duration shutdown_barrier_timeout = absl::Minutes(5);
  bool register_barrier = true;
  KeyValueLimits key_value;
  ParkLimits parked;
  BarrierLimits barriers;
  // Zero picks a random one. Set it to keep the incarnation across coordinator restarts.
  uint64_t service_incarnation = 0;
};

absl::Status ValidateConfig(const ServiceConfig& config);

}  // namespace cohort
