#include "sidecar/gpu/gpu_topology.h"

#include <optional>

#include "sidecar/gpu/gpu_inventory.h"
#include "sidecar/gpu/pci_address.h"

namespace cohort::gpu {
namespace {

// NVML answers NVML_ERROR_INVALID_ARGUMENT past a GPU's last link; this bounds the probe in
// case a library never does. Hopper has 18 links; NVML's own limit has grown over time.
constexpr unsigned int kMaxNvLinksProbed = 64;

NvLinkPeer PeerFromNvml(nvml::NvLinkDeviceType type) {
  switch (type) {
    case nvml::kNvLinkDeviceGpu:
      return NvLinkPeer::kGpu;
    case nvml::kNvLinkDeviceSwitch:
      return NvLinkPeer::kSwitch;
    case nvml::kNvLinkDeviceIbmNpu:
      return NvLinkPeer::kOther;
    default:
      return NvLinkPeer::kUnknown;
  }
}

std::optional<PcieAffinity> AffinityFromNvml(nvml::TopologyLevel level) {
  switch (level) {
    case nvml::kTopologyInternal:
      return PcieAffinity::kSameBoard;
    case nvml::kTopologySingle:
      return PcieAffinity::kSingleSwitch;
    case nvml::kTopologyMultiple:
      return PcieAffinity::kMultipleSwitches;
    case nvml::kTopologyHostBridge:
      return PcieAffinity::kHostBridge;
    case nvml::kTopologyNode:
      return PcieAffinity::kNumaNode;
    case nvml::kTopologySystem:
      return PcieAffinity::kSystem;
  }
  return std::nullopt;  // a level newer than this code
}

bool HasSwitchLink(const GpuInfo& gpu) {
  for (const NvLink& link : gpu.nvlinks) {
    if (link.peer == NvLinkPeer::kSwitch) return true;
  }
  return false;
}

}  // namespace

std::vector<NvLink> ReadActiveNvLinks(const NvmlApi& api, nvml::Device device, DeviceQuery* query) {
  std::vector<NvLink> links;
  for (unsigned int link = 0; link < kMaxNvLinksProbed; ++link) {
    nvml::EnableState active = nvml::kFeatureDisabled;
    nvml::Return result =
        query->Call("nvmlDeviceGetNvLinkState", api.device_get_nvlink_state, device, link, &active);
    // A GPU without NVLink says NOT_SUPPORTED for every link; past the last link NVML says
    // INVALID_ARGUMENT. A link the GPU has but does not use reports success and "disabled".
    if (result == nvml::kErrorNotSupported) continue;
    if (result != nvml::kSuccess) break;
    if (active != nvml::kFeatureEnabled) continue;

    NvLink nvlink;
    nvlink.link = link;
    nvml::PciInfo remote = {};
    if (query->Ok("nvmlDeviceGetNvLinkRemotePciInfo_v2", api.device_get_nvlink_remote_pci_info,
                  device, link, &remote)) {
      nvlink.remote_pci_bus_id = FromNvmlBuffer(remote.bus_id, sizeof(remote.bus_id));
    }
    nvml::NvLinkDeviceType type = nvml::kNvLinkDeviceUnknown;
    if (query->Ok("nvmlDeviceGetNvLinkRemoteDeviceType", api.device_get_nvlink_remote_device_type,
                  device, link, &type)) {
      nvlink.peer = PeerFromNvml(type);
    }
    links.push_back(nvlink);
  }
  return links;
}

std::vector<GpuPairTopology> ReadTopology(const NvmlApi& api,
                                          const std::vector<nvml::Device>& devices,
                                          std::vector<GpuInfo>* gpus) {
  std::vector<std::optional<PciAddress>> addresses;
  for (const GpuInfo& gpu : *gpus) addresses.push_back(ParsePciAddress(gpu.pci_bus_id));

  for (GpuInfo& gpu : *gpus) {
    for (NvLink& link : gpu.nvlinks) {
      std::optional<PciAddress> remote = ParsePciAddress(link.remote_pci_bus_id);
      if (!remote) continue;
      for (size_t other = 0; other < gpus->size(); ++other) {
        if (addresses[other] == remote) {
          link.remote_gpu_index = static_cast<int>(other);
          // Older drivers lack nvmlDeviceGetNvLinkRemoteDeviceType; a bus id we know is a GPU.
          if (link.peer == NvLinkPeer::kUnknown) link.peer = NvLinkPeer::kGpu;
        }
      }
    }
  }

  std::vector<GpuPairTopology> pairs;
  for (size_t first = 0; first < gpus->size(); ++first) {
    for (size_t second = first + 1; second < gpus->size(); ++second) {
      GpuPairTopology pair;
      pair.first = static_cast<int>(first);
      pair.second = static_cast<int>(second);
      const GpuInfo& a = (*gpus)[first];
      const GpuInfo& b = (*gpus)[second];
      if (devices[first] != nullptr && devices[second] != nullptr && !a.lost && !b.lost &&
          api.device_get_topology_common_ancestor != nullptr) {
        nvml::TopologyLevel level = nvml::kTopologySystem;
        if (api.device_get_topology_common_ancestor(devices[first], devices[second], &level) ==
            nvml::kSuccess) {
          pair.pcie = AffinityFromNvml(level);
        }
      }
      for (const NvLink& link : a.nvlinks) {
        if (link.remote_gpu_index == pair.second) ++pair.direct_nvlinks;
      }
      pair.nvswitch = HasSwitchLink(a) && HasSwitchLink(b);
      pairs.push_back(pair);
    }
  }
  return pairs;
}

}  // namespace cohort::gpu
