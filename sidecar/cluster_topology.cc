#include "sidecar/cluster_topology.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace cohort {

v1::TaskTopology LocalTopology(const gpu::GpuInventory& inventory, int task_id,
                               const std::string& hostname, const std::string& pod_ip,
                               const std::string& pod_name) {
  v1::TaskTopology out;
  out.set_task_id(task_id);
  out.set_hostname(hostname);
  out.set_pod_ip(pod_ip);
  out.set_pod_name(pod_name);
  out.set_driver_version(inventory.driver.driver_version);
  for (const gpu::GpuInfo& info : inventory.gpus) {
    v1::GpuDevice* device = out.add_gpus();
    device->set_local_index(info.index);
    device->set_uuid(info.uuid);
    device->set_name(info.name);
    device->set_pci_bus_id(info.pci_bus_id);
    device->set_memory_total_bytes(info.memory_total_bytes.value_or(0));
    if (info.compute_capability) {
      device->set_compute_capability(
          absl::StrCat(info.compute_capability->major, ".", info.compute_capability->minor));
    }
    device->set_numa_node(info.numa_node.value_or(-1));
  }
  return out;
}

tensorflow::DeviceInfo PackTopology(const v1::TaskTopology& local) {
  tensorflow::DeviceInfo info;
  info.add_device()->PackFrom(local);
  return info;
}

absl::StatusOr<std::vector<v1::TaskTopology>> UnpackTopology(
    const tensorflow::DeviceInfo& cluster) {
  std::vector<v1::TaskTopology> tasks;
  std::set<int> seen;
  for (const auto& any : cluster.device()) {
    v1::TaskTopology task;
    if (!any.UnpackTo(&task)) {
      return absl::InvalidArgumentError(
          absl::StrCat("a sidecar published ", any.type_url(), ", not cohort.v1.TaskTopology"));
    }
    if (!seen.insert(task.task_id()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("two sidecars published task ", task.task_id()));
    }
    tasks.push_back(std::move(task));
  }
  std::sort(tasks.begin(), tasks.end(),
            [](const auto& a, const auto& b) { return a.task_id() < b.task_id(); });
  return tasks;
}

std::vector<GlobalGpu> GlobalGpus(const ClusterView& view) {
  std::vector<GlobalGpu> out;
  for (const v1::TaskTopology& task : view.tasks) {
    std::vector<const v1::GpuDevice*> local;
    for (const v1::GpuDevice& device : task.gpus()) local.push_back(&device);
    std::sort(local.begin(), local.end(),
              [](const auto* a, const auto* b) { return a->local_index() < b->local_index(); });
    for (const v1::GpuDevice* device : local) {
      out.push_back({static_cast<int>(out.size()), task.task_id(), device});
    }
  }
  return out;
}

namespace {

nlohmann::json GpuJson(const v1::GpuDevice& device) {
  return {{"local_index", device.local_index()},
          {"uuid", device.uuid()},
          {"name", device.name()},
          {"pci_bus_id", device.pci_bus_id()},
          {"memory_total_bytes", device.memory_total_bytes()},
          {"compute_capability", device.compute_capability()},
          {"numa_node",
           device.numa_node() < 0 ? nlohmann::json() : nlohmann::json(device.numa_node())}};
}

// Single-quoted for sh: the file is meant to be sourced.
std::string ShellQuote(const std::string& value) {
  std::string out = "'";
  for (char c : value) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace

std::string ClusterJson(const ClusterView& view) {
  nlohmann::json local = nlohmann::json::array(), global = nlohmann::json::array(),
                 peers = nlohmann::json::array();
  for (const v1::TaskTopology& task : view.tasks) {
    peers.push_back({{"task", task.task_id()},
                     {"pod", task.pod_name()},
                     {"hostname", task.hostname()},
                     {"address", task.pod_ip()},
                     {"gpus", task.gpus_size()}});
    if (task.task_id() != view.rank) continue;
    for (const v1::GpuDevice& device : task.gpus()) local.push_back(GpuJson(device));
  }
  for (const GlobalGpu& g : GlobalGpus(view)) {
    nlohmann::json entry = GpuJson(*g.device);
    entry["global_id"] = g.global_id;
    entry["task"] = g.task_id;
    global.push_back(std::move(entry));
  }
  nlohmann::json out = {{"job", view.job},
                        {"rank", view.rank},
                        {"world_size", view.world_size},
                        {"coordinator_address", view.coordinator_address},
                        {"local_gpus", local},
                        {"global_gpus", global},
                        {"peers", peers}};
  return out.dump(2) + "\n";
}

std::string ClusterEnv(const ClusterView& view) {
  std::vector<std::string> local_uuids, global_ids, peers;
  for (const GlobalGpu& g : GlobalGpus(view)) {
    if (g.task_id != view.rank) continue;
    local_uuids.push_back(g.device->uuid());
    global_ids.push_back(absl::StrCat(g.global_id));
  }
  for (const v1::TaskTopology& task : view.tasks) peers.push_back(task.pod_ip());
  std::string out;
  auto line = [&out](const char* key, const std::string& value) {
    absl::StrAppend(&out, key, "=", ShellQuote(value), "\n");
  };
  line("COHORT_JOB_NAME", view.job);
  line("COHORT_RANK", absl::StrCat(view.rank));
  line("COHORT_WORLD_SIZE", absl::StrCat(view.world_size));
  line("COHORT_COORDINATOR_ADDRESS", view.coordinator_address);
  line("COHORT_LOCAL_GPU_UUIDS", absl::StrJoin(local_uuids, ","));
  line("COHORT_GLOBAL_GPU_IDS", absl::StrJoin(global_ids, ","));
  line("COHORT_NUM_GLOBAL_GPUS", absl::StrCat(GlobalGpus(view).size()));
  line("COHORT_PEER_ADDRESSES", absl::StrJoin(peers, ","));
  return out;
}

}  // namespace cohort
