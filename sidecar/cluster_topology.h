#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cohort/v1/topology.pb.h"
#include "sidecar/gpu/gpu_types.h"
#include "tensorflow/coordination_service.pb.h"

namespace cohort {

// This pod as the other sidecars see it.
v1::TaskTopology LocalTopology(const gpu::GpuInventory& inventory, int task_id,
                               const std::string& hostname, const std::string& pod_ip,
                               const std::string& pod_name);

// One Any per task through WaitForAllTasks.
tensorflow::DeviceInfo PackTopology(const v1::TaskTopology& local);
// The cluster, ordered by task id; INVALID_ARGUMENT when an entry is not a TaskTopology or a
// task id repeats.
absl::StatusOr<std::vector<v1::TaskTopology>> UnpackTopology(const tensorflow::DeviceInfo& cluster);

// What the workload gets: its rank, the world, and every GPU with a global id that is dense
// and ordered by task, then local index.
struct ClusterView {
  std::string job;
  int rank = 0;
  int world_size = 0;
  std::string coordinator_address;
  std::vector<v1::TaskTopology> tasks;  // ordered by task id
};

struct GlobalGpu {
  int global_id = 0;
  int task_id = 0;
  const v1::GpuDevice* device = nullptr;
};
std::vector<GlobalGpu> GlobalGpus(const ClusterView& view);

// cluster.json and cluster.env (KEY=value lines, shell-quoted) for the hand-off directory.
std::string ClusterJson(const ClusterView& view);
std::string ClusterEnv(const ClusterView& view);

}  // namespace cohort
