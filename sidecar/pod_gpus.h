// Which GPUs are the pod's, and whether the sidecar sees them.
//
// With the NVIDIA device plugin, a GPU given to the workload's container (an nvidia.com/gpu
// limit) cannot be given to the sidecar too. A sidecar that sees the node's GPUs
// (NVIDIA_VISIBLE_DEVICES=all) asks the kubelet's PodResources API which of them the kubelet
// gave its pod's other containers, and watches only those. With DRA the sidecar references
// the pod's claims and sees exactly their devices: nothing to ask.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace cohort {

// The device IDs (GPU UUIDs) the kubelet at `socket` (a unix socket path) gave pod
// `ns`/`pod`'s containers other than `own_container`, for resources named `resource` or
// starting with `resource` + "-" (nvidia.com/gpu, and MIG's nvidia.com/mig-1g.5gb with
// resource "nvidia.com/mig"). Unavailable when the kubelet does not answer, NotFound when it
// does not know the pod.
absl::StatusOr<std::vector<std::string>> PodDeviceIds(const std::string& socket,
                                                      const std::string& ns, const std::string& pod,
                                                      const std::string& own_container,
                                                      const std::vector<std::string>& resources,
                                                      absl::Duration timeout = absl::Seconds(5));

// What the sidecar can say about seeing the pod's GPUs: `expected` GPUs asked for (-1:
// unknown), `visible` seen. Empty when all is well; otherwise one sentence for the log that
// says what is missing and how a cluster gives the sidecar its pod's GPUs.
std::string GpuVisibilityProblem(int expected, int visible, const std::string& nvml_diagnostic,
                                 const std::string& how_found);

}  // namespace cohort
