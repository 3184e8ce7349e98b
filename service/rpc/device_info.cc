#include "service/rpc/device_info.h"

#include <algorithm>

namespace cohort {
namespace {

// First byte of an encoded description: which message follows.
constexpr char kCurrent = 'd';
constexpr char kLegacy = 'l';
constexpr char kTopology = 't';

template <typename Global>
void NumberDevices(Global* topology) {
  auto* nodes = topology->mutable_nodes();
  std::stable_sort(nodes->begin(), nodes->end(),
                   [](const auto& a, const auto& b) { return a.node_id() < b.node_id(); });
  int32_t next = 0;
  for (auto& node : *nodes) {
    auto* devices = node.mutable_devices();
    std::stable_sort(devices->begin(), devices->end(), [](const auto& a, const auto& b) {
      return a.local_device_ordinal() < b.local_device_ordinal();
    });
    for (auto& device : *devices) device.set_global_device_id(next++);
  }
}

}  // namespace

std::string EncodeDevices(const tensorflow::DeviceInfo& devices) {
  return kCurrent + devices.SerializeAsString();
}

std::string EncodeLegacyDevices(const tensorflow::CoordinationServiceDeviceInfo& devices) {
  return kLegacy + devices.SerializeAsString();
}

std::string EncodeLocalTopology(const xla::LocalTopologyProtoV3& topology) {
  return kTopology + topology.SerializeAsString();
}

xla::LocalTopologyProtoV3 ToV3(const xla::LocalTopologyProto& topology) {
  xla::LocalTopologyProtoV3 out;
  out.set_node_id(topology.node_id());
  for (const auto& device : topology.devices()) {
    auto* d = out.add_devices();
    d->set_local_device_ordinal(device.local_device_ordinal());
    d->set_name(device.name());
    d->set_vendor(device.vendor());
    d->set_global_device_id(device.global_device_id());
  }
  return out;
}

xla::GlobalTopologyProto ToV1(const xla::GlobalTopologyProtoV3& topology) {
  xla::GlobalTopologyProto out;
  for (const auto& node : topology.nodes()) {
    auto* n = out.add_nodes();
    n->set_node_id(node.node_id());
    for (const auto& device : node.devices()) {
      auto* d = n->add_devices();
      d->set_local_device_ordinal(device.local_device_ordinal());
      d->set_name(device.name());
      d->set_vendor(device.vendor());
      d->set_global_device_id(device.global_device_id());
    }
  }
  return out;
}

void MergeDevices(const std::vector<std::string>& encoded, tensorflow::DeviceInfo* devices,
                  tensorflow::CoordinationServiceDeviceInfo* legacy) {
  bool xla = false;
  for (const std::string& blob : encoded) {
    if (blob.empty()) continue;
    if (blob[0] == kCurrent) {
      tensorflow::DeviceInfo one;
      one.ParseFromArray(blob.data() + 1, static_cast<int>(blob.size() - 1));
      devices->MergeFrom(one);
    } else if (blob[0] == kLegacy) {
      tensorflow::CoordinationServiceDeviceInfo one;
      one.ParseFromArray(blob.data() + 1, static_cast<int>(blob.size() - 1));
      if (one.has_xla()) {
        xla = true;
        legacy->mutable_xla()->mutable_devices()->mutable_nodes()->MergeFrom(
            one.xla().devices().nodes());
      } else if (one.has_tf()) {
        legacy->mutable_tf()->mutable_devices()->MergeFrom(one.tf().devices());
      }
    }
  }
  if (xla) NumberDevices(legacy->mutable_xla()->mutable_devices());
}

xla::GlobalTopologyProtoV3 BuildGlobalTopology(const std::vector<std::string>& encoded) {
  xla::GlobalTopologyProtoV3 global;
  for (const std::string& blob : encoded) {
    if (blob.empty() || blob[0] != kTopology) continue;
    global.add_nodes()->ParseFromArray(blob.data() + 1, static_cast<int>(blob.size() - 1));
  }
  NumberDevices(&global);
  return global;
}

}  // namespace cohort
