#pragma once

// What the sidecar knows about a node's GPUs: the inventory read once at start, the telemetry
// sampled every few seconds, and health. Plain values; NVML does not appear here.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cohort::gpu {

struct DriverInfo {
  std::string driver_version;  // "550.54.15"
  std::string nvml_version;    // "12.550.54.15"
  // The CUDA version the driver supports, as NVML encodes it: 1000 * major + 10 * minor.
  std::optional<int> cuda_driver_version;
};

struct ComputeCapability {
  int major = 0;
  int minor = 0;
};

struct MigMode {
  bool enabled = false;          // in effect now
  bool pending_enabled = false;  // after the next GPU reset
};

enum class NvLinkPeer { kGpu, kSwitch, kOther, kUnknown };

// One active NVLink of a GPU.
struct NvLink {
  unsigned int link = 0;
  std::string remote_pci_bus_id;  // empty when NVML could not say
  NvLinkPeer peer = NvLinkPeer::kUnknown;
  // Set when the far end is another GPU of this node.
  std::optional<int> remote_gpu_index;
};

struct GpuInfo {
  int index = 0;  // NVML's index, which orders GPUs by PCI bus id
  std::string uuid;
  std::string name;
  std::string pci_bus_id;  // "00000000:18:00.0"
  // Device id in the high 16 bits, vendor id (0x10de) in the low 16.
  std::optional<uint32_t> pci_device_id;
  std::optional<uint64_t> memory_total_bytes;
  std::optional<ComputeCapability> compute_capability;
  // The CPU NUMA node nearest the GPU (nvidia-smi topo's "NUMA Affinity"): where a rank's
  // threads and host memory belong. The lowest, if NVML names several.
  std::optional<int> numa_node;
  // The NUMA node that is the GPU's own memory, on platforms where it is one (Grace Hopper);
  // nvidia-smi topo's "GPU NUMA ID".
  std::optional<int> gpu_numa_id;
  std::optional<MigMode> mig_mode;  // absent on GPUs without MIG
  std::optional<bool> ecc_enabled;
  std::vector<NvLink> nvlinks;
  // Lost while the inventory was read: the fields NVML could not give stay empty.
  bool lost = false;
};

// How the PCIe paths of two GPUs meet, in nvidia-smi topo's terms.
enum class PcieAffinity {
  kSameBoard,         // one board with several GPUs
  kSingleSwitch,      // PIX
  kMultipleSwitches,  // PXB
  kHostBridge,        // PHB
  kNumaNode,          // NODE: the same NUMA node through different host bridges
  kSystem,            // SYS: across NUMA nodes
};

struct GpuPairTopology {
  int first = 0;  // GPU indices, first < second
  int second = 0;
  std::optional<PcieAffinity> pcie;
  int direct_nvlinks = 0;  // active links from `first` whose far end is `second`
  bool nvswitch = false;   // both GPUs have active links to NVSwitches, so they talk over NVLink
};

struct GpuInventory {
  bool nvml_loaded = false;
  std::string library_path;
  // One sentence for the log when NVML could not be used or found no GPUs; empty otherwise.
  std::string diagnostic;
  // Optional NVML functions the loaded library lacks (an older driver).
  std::vector<std::string> missing_functions;
  DriverInfo driver;
  std::vector<GpuInfo> gpus;
  std::vector<GpuPairTopology> topology;  // one entry per pair of GPUs
};

// ECC error counts. NVML calls single-bit errors "corrected" and double-bit ones "uncorrected".
struct EccCounts {
  std::optional<uint64_t> volatile_single_bit;  // since the driver loaded
  std::optional<uint64_t> volatile_double_bit;
  std::optional<uint64_t> aggregate_single_bit;  // over the board's lifetime
  std::optional<uint64_t> aggregate_double_bit;
};

struct RemappedRows {
  uint32_t correctable = 0;
  uint32_t uncorrectable = 0;
  bool pending = false;  // a remapping waits for the next GPU reset
  bool failure = false;  // a remapping failed: the row could not be replaced
};

// One reading of a GPU's telemetry. A field NVML does not support on this GPU (or this driver)
// is empty.
struct GpuSample {
  int index = 0;
  bool lost = false;  // the GPU fell off the bus; every other field is empty
  // The share of the last sample period in which any kernel ran: a kernel that spins (a
  // collective waiting on a lost peer) keeps it at 100 %.
  std::optional<uint32_t> gpu_utilization_percent;
  std::optional<uint32_t> memory_utilization_percent;
  // The share of the GPU's SMs that were busy (0..1) since the previous sample, from NVML's GPM
  // counters (NVML_GPM_METRIC_SM_UTIL): a spinning collective holds only its channels' SMs. Only
  // on GPUs with GPM (Hopper and later, a driver from R520 on), from the second sample on.
  std::optional<double> sm_activity;
  std::optional<uint64_t> memory_used_bytes;
  std::optional<uint64_t> memory_free_bytes;
  // Set aside by the driver and firmware; absent on drivers that count it in "used".
  std::optional<uint64_t> memory_reserved_bytes;
  std::optional<uint32_t> temperature_celsius;
  std::optional<uint32_t> power_milliwatts;
  std::optional<uint32_t> power_limit_milliwatts;
  std::optional<uint64_t> energy_millijoules;  // since the driver loaded
  std::optional<uint32_t> sm_clock_mhz;
  EccCounts ecc;
  std::optional<RemappedRows> remapped_rows;
  std::optional<uint32_t> pcie_replay_count;
};

enum class HealthProblem {
  kCriticalXid,   // the driver reported an XID not on the ignore list
  kDoubleBitEcc,  // an uncorrectable memory error
  kGpuLost,       // NVML answered NVML_ERROR_GPU_IS_LOST
};

// A GPU turned out to have a problem. Sent once per GPU and problem (once per XID code for
// XIDs), so a repeating fault does not flood the coordinator.
struct HealthEvent {
  int gpu_index = 0;
  std::string gpu_uuid;
  HealthProblem problem = HealthProblem::kCriticalXid;
  uint64_t xid = 0;  // the XID code for kCriticalXid, else 0
  // NVML's recovery action for the GPU when the problem was found, an
  // nvmlDeviceGpuRecoveryAction_t (0 none, 1 GPU reset, 2 node reboot, ...; see
  // DescribeRecoveryAction). Absent when the driver does not report one, and for a lost GPU,
  // which answers nothing.
  std::optional<unsigned int> recovery_action;
  // For people: "XID 79 (GPU has fallen off the bus)", followed by "; recovery action: GPU
  // reset" when the action is known.
  std::string reason;
};

struct GpuHealth {
  int gpu_index = 0;
  std::string gpu_uuid;
  // Once unhealthy, a GPU stays so: every problem here needs a GPU reset or a new node.
  bool healthy = true;
  std::vector<std::string> reasons;  // in the order found
};

}  // namespace cohort::gpu
