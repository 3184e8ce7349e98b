// The inventory read through the fake NVML: every field equals the fake's configuration, and
// the topology between GPUs (PCIe, NVLink to NVSwitches, direct NVLinks) comes out right.

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sidecar/gpu/gpu_monitor.h"
#include "tests/sidecar/gpu/fake_nvml_test_support.h"

namespace cohort::gpu {
namespace {

using ::cohort::gpu::testing::kFakeNvml;
using ::cohort::gpu::testing::kOldDriverFakeNvml;
using ::cohort::gpu::testing::MonitorRecorder;
using ::cohort::gpu::testing::ScopedFakeNode;
using ::cohort::gpu::testing::TestData;
using ::testing::Each;
using ::testing::Field;
using ::testing::IsEmpty;
using ::testing::Optional;

nlohmann::json ReadConfig(const std::string& name) {
  std::ifstream file(TestData(name));
  return nlohmann::json::parse(file);
}

// A directory laid out like /sys/bus/pci/devices, removed at the end of the test.
class FakeSysfs {
 public:
  FakeSysfs()
      : root_(std::filesystem::temp_directory_path() /
              ("gpu_inventory_test_sysfs." + std::to_string(getpid()))) {
    std::filesystem::create_directories(root_);
  }
  ~FakeSysfs() { std::filesystem::remove_all(root_); }

  void SetNumaNode(const std::string& device, int node) {
    std::filesystem::create_directories(root_ / device);
    std::ofstream(root_ / device / "numa_node") << node << "\n";
  }
  std::string path() const { return root_.string(); }

 private:
  std::filesystem::path root_;
};

class GpuInventoryTest : public ::testing::Test {
 protected:
  const GpuInventory& Open(const std::string& config, const char* library = kFakeNvml,
                           std::optional<std::vector<std::string>> only = std::nullopt) {
    monitor_.reset();
    node_.reset();
    node_ = std::make_unique<ScopedFakeNode>(config);
    GpuMonitorOptions options = recorder_.Options(library);
    options.only_uuids = std::move(only);
    options.sysfs_pci_devices_dir = sysfs_.path();
    monitor_ = std::make_unique<GpuMonitor>(options);
    return monitor_->inventory();
  }

  const GpuPairTopology& Pair(int first, int second) {
    for (const GpuPairTopology& pair : monitor_->inventory().topology) {
      if (pair.first == first && pair.second == second) return pair;
    }
    ADD_FAILURE() << "no pair " << first << "," << second;
    static GpuPairTopology none;
    return none;
  }

  FakeSysfs sysfs_;
  MonitorRecorder recorder_;
  std::unique_ptr<ScopedFakeNode> node_;
  std::unique_ptr<GpuMonitor> monitor_;
};

TEST_F(GpuInventoryTest, EightGpusMatchTheConfiguration) {
  const GpuInventory& inventory = Open("eight_gpus.json");
  nlohmann::json config = ReadConfig("eight_gpus.json");

  EXPECT_TRUE(inventory.nvml_loaded);
  EXPECT_EQ(inventory.diagnostic, "");
  EXPECT_THAT(inventory.missing_functions, IsEmpty());
  EXPECT_EQ(inventory.driver.driver_version, "550.54.15");
  EXPECT_EQ(inventory.driver.nvml_version, "12.550.54.15");
  EXPECT_EQ(inventory.driver.cuda_driver_version, 12040);
  ASSERT_EQ(inventory.gpus.size(), 8u);
  for (size_t i = 0; i < inventory.gpus.size(); ++i) {
    SCOPED_TRACE("GPU " + std::to_string(i));
    const GpuInfo& gpu = inventory.gpus[i];
    const nlohmann::json& expected = config["gpus"][i];
    EXPECT_EQ(gpu.index, static_cast<int>(i));
    EXPECT_EQ(gpu.uuid, expected["uuid"]);
    EXPECT_EQ(gpu.name, "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(gpu.pci_bus_id, expected["pci_bus_id"]);
    EXPECT_THAT(gpu.pci_device_id, Optional(0x233010DEu));
    EXPECT_THAT(gpu.memory_total_bytes, Optional(85520809984u));
    ASSERT_TRUE(gpu.compute_capability.has_value());
    EXPECT_EQ(gpu.compute_capability->major, 9);
    EXPECT_EQ(gpu.compute_capability->minor, 0);
    EXPECT_THAT(gpu.numa_node, Optional(expected["numa_node"].get<int>()));
    EXPECT_EQ(gpu.gpu_numa_id, std::nullopt);
    ASSERT_TRUE(gpu.mig_mode.has_value());
    EXPECT_EQ(gpu.mig_mode->enabled, expected["mig_mode"]["current"] == 1);
    EXPECT_EQ(gpu.mig_mode->pending_enabled, expected["mig_mode"]["pending"] == 1);
    EXPECT_THAT(gpu.ecc_enabled, Optional(true));
    EXPECT_EQ(gpu.nvlinks.size(), 18u);
    EXPECT_FALSE(gpu.lost);
  }
  // A few values spelled out, so the test does not only compare the fake with itself.
  EXPECT_EQ(inventory.gpus[0].uuid, "GPU-6f1c3a52-8d2e-4b7a-9c1d-000000001000");
  EXPECT_EQ(inventory.gpus[3].pci_bus_id, "00000000:5D:00.0");
  EXPECT_THAT(inventory.gpus[4].numa_node, Optional(1));
  EXPECT_TRUE(inventory.gpus[7].mig_mode->enabled);
  EXPECT_FALSE(inventory.gpus[6].mig_mode->enabled);
  EXPECT_TRUE(inventory.gpus[6].mig_mode->pending_enabled);
}

TEST_F(GpuInventoryTest, NvLinksToNvSwitchesAreListedWithTheirFarEnd) {
  const GpuInventory& inventory = Open("eight_gpus.json");

  const std::vector<NvLink>& links = inventory.gpus[0].nvlinks;
  ASSERT_EQ(links.size(), 18u);
  EXPECT_THAT(links, Each(Field(&NvLink::peer, NvLinkPeer::kSwitch)));
  EXPECT_THAT(links, Each(Field(&NvLink::remote_gpu_index, std::nullopt)));
  EXPECT_EQ(links[0].link, 0u);
  EXPECT_EQ(links[0].remote_pci_bus_id, "00000000:05:00.0");
  EXPECT_EQ(links[17].link, 17u);
  EXPECT_EQ(links[17].remote_pci_bus_id, "00000000:08:00.0");
}

TEST_F(GpuInventoryTest, TopologyDescribesEveryPairOfGpus) {
  const GpuInventory& inventory = Open("eight_gpus.json");

  ASSERT_EQ(inventory.topology.size(), 28u);  // 8 choose 2
  EXPECT_EQ(Pair(0, 1).pcie, PcieAffinity::kMultipleSwitches);
  EXPECT_EQ(Pair(0, 2).pcie, PcieAffinity::kNumaNode);
  EXPECT_EQ(Pair(0, 4).pcie, PcieAffinity::kSystem);
  EXPECT_EQ(Pair(6, 7).pcie, PcieAffinity::kMultipleSwitches);
  EXPECT_EQ(Pair(3, 7).pcie, PcieAffinity::kSystem);
  for (const GpuPairTopology& pair : inventory.topology) {
    EXPECT_LT(pair.first, pair.second);
    EXPECT_TRUE(pair.nvswitch) << pair.first << "," << pair.second;
    EXPECT_EQ(pair.direct_nvlinks, 0);
  }
}

TEST_F(GpuInventoryTest, DirectNvLinksPointAtThePeerGpu) {
  const GpuInventory& inventory = Open("nvlink_mesh.json");

  ASSERT_EQ(inventory.gpus.size(), 4u);
  const std::vector<NvLink>& links = inventory.gpus[0].nvlinks;
  ASSERT_EQ(links.size(), 4u);
  EXPECT_THAT(links, Each(Field(&NvLink::peer, NvLinkPeer::kGpu)));
  EXPECT_EQ(links[0].remote_gpu_index, 1);
  EXPECT_EQ(links[1].remote_gpu_index, 1);
  EXPECT_EQ(links[2].remote_gpu_index, 2);
  EXPECT_EQ(links[3].remote_gpu_index, 3);
  EXPECT_EQ(Pair(0, 1).direct_nvlinks, 2);
  EXPECT_EQ(Pair(0, 2).direct_nvlinks, 1);
  EXPECT_EQ(Pair(1, 3).direct_nvlinks, 1);
  EXPECT_EQ(Pair(2, 3).direct_nvlinks, 2);
  EXPECT_FALSE(Pair(0, 1).nvswitch);
  // This driver reports no PCIe topology.
  EXPECT_EQ(Pair(0, 1).pcie, std::nullopt);
}

TEST_F(GpuInventoryTest, ThePodsGpusAloneAreNumberedAsItsContainerNumbersThem) {
  nlohmann::json config = ReadConfig("nvlink_mesh.json");
  const std::string second = config["gpus"][1]["uuid"], last = config["gpus"][3]["uuid"];
  const GpuInventory& inventory = Open("nvlink_mesh.json", kFakeNvml, {{last, second}});
  ASSERT_EQ(inventory.gpus.size(), 2u);
  // NVML's order, renumbered from 0.
  EXPECT_EQ(inventory.gpus[0].uuid, second);
  EXPECT_EQ(inventory.gpus[0].index, 0);
  EXPECT_EQ(inventory.gpus[1].uuid, last);
  EXPECT_EQ(inventory.gpus[1].index, 1);
  // GPU 1 -> 3 was one direct link; a link to a GPU that is not the pod's has no index.
  ASSERT_EQ(inventory.topology.size(), 1u);
  EXPECT_EQ(Pair(0, 1).direct_nvlinks, 1);
  int to_peer = 0, elsewhere = 0;
  for (const NvLink& link : inventory.gpus[0].nvlinks) {
    if (link.remote_gpu_index == 1) ++to_peer;
    if (link.peer == NvLinkPeer::kGpu && !link.remote_gpu_index) ++elsewhere;
  }
  EXPECT_EQ(to_peer, 1);
  EXPECT_EQ(elsewhere, 3);
  EXPECT_EQ(monitor_->Sample().size(), 2u);
  // A UUID the node does not have is named in the log.
  const GpuInventory& none = Open("nvlink_mesh.json", kFakeNvml, {{"GPU-nowhere"}});
  EXPECT_TRUE(none.gpus.empty());
  EXPECT_THAT(recorder_.logs(),
              ::testing::Contains(::testing::HasSubstr("GPU-nowhere is not among them")));
}

TEST_F(GpuInventoryTest, FieldsTheGpuDoesNotSupportAreEmpty) {
  const GpuInventory& inventory = Open("nvlink_mesh.json");

  const GpuInfo& gpu = inventory.gpus[2];
  EXPECT_EQ(gpu.name, "Tesla V100-SXM2-32GB");
  EXPECT_EQ(gpu.mig_mode, std::nullopt);
  EXPECT_EQ(gpu.numa_node, std::nullopt);
  EXPECT_EQ(gpu.gpu_numa_id, std::nullopt);
  EXPECT_EQ(inventory.driver.cuda_driver_version, 11040);
}

TEST_F(GpuInventoryTest, NumaNodeComesFromSysfsWhenNvmlCannotSay) {
  sysfs_.SetNumaNode("0000:18:00.0", 3);   // GPU 0, written as Linux writes bus ids
  sysfs_.SetNumaNode("0000:2a:00.0", -1);  // GPU 1, on a machine without NUMA
  const GpuInventory& inventory = Open("eight_gpus.json", kOldDriverFakeNvml);

  EXPECT_THAT(inventory.gpus[0].numa_node, Optional(3));
  EXPECT_EQ(inventory.gpus[1].numa_node, std::nullopt);
  EXPECT_EQ(inventory.gpus[2].numa_node, std::nullopt);  // no sysfs entry
}

TEST_F(GpuInventoryTest, OlderDriverStillReadsIdentityThroughOlderFunctions) {
  const GpuInventory& inventory = Open("eight_gpus.json", kOldDriverFakeNvml);

  const GpuInfo& gpu = inventory.gpus[5];
  EXPECT_EQ(gpu.uuid, "GPU-6f1c3a52-8d2e-4b7a-9c1d-000000001005");
  EXPECT_EQ(gpu.pci_bus_id, "00000000:AB:00.0");                // nvmlDeviceGetPciInfo_v2
  EXPECT_THAT(gpu.memory_total_bytes, Optional(85520809984u));  // nvmlDeviceGetMemoryInfo
  // Without nvmlDeviceGetNvLinkRemoteDeviceType a link to a bus id that is no GPU of ours is
  // of unknown kind, so NVSwitch connectivity cannot be claimed.
  ASSERT_EQ(gpu.nvlinks.size(), 18u);
  EXPECT_THAT(gpu.nvlinks, Each(Field(&NvLink::peer, NvLinkPeer::kUnknown)));
  EXPECT_FALSE(Pair(0, 1).nvswitch);
}

}  // namespace
}  // namespace cohort::gpu
