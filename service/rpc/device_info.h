#pragma once

#include <string>
#include <vector>

#include "tensorflow/coordination_service.pb.h"
#include "xla/distributed_runtime.pb.h"

namespace cohort {

// The core exchanges device descriptions as opaque strings; these turn the protocols'
// messages into such strings and the gathered strings back into one answer.
std::string EncodeDevices(const tensorflow::DeviceInfo& devices);
std::string EncodeLegacyDevices(const tensorflow::CoordinationServiceDeviceInfo& devices);
// Topologies of either layout are kept in the newer one (a superset).
std::string EncodeLocalTopology(const xla::LocalTopologyProtoV3& topology);
xla::LocalTopologyProtoV3 ToV3(const xla::LocalTopologyProto& topology);
xla::GlobalTopologyProto ToV1(const xla::GlobalTopologyProtoV3& topology);

// Concatenates every task's devices, in task order. Legacy XLA topologies are merged into one
// GlobalTopologyProto with dense global device ids.
void MergeDevices(const std::vector<std::string>& encoded, tensorflow::DeviceInfo* devices,
                  tensorflow::CoordinationServiceDeviceInfo* legacy);

// Nodes ordered by node id; global device ids numbered densely in that order, then by local
// ordinal within a node.
xla::GlobalTopologyProtoV3 BuildGlobalTopology(const std::vector<std::string>& encoded);

}  // namespace cohort
