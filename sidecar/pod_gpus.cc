#include "sidecar/pod_gpus.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kubelet/podresources/v1/podresources.grpc.pb.h"

namespace cohort {

absl::StatusOr<std::vector<std::string>> PodDeviceIds(const std::string& socket,
                                                      const std::string& ns, const std::string& pod,
                                                      const std::string& own_container,
                                                      const std::vector<std::string>& resources,
                                                      absl::Duration timeout) {
  auto channel = grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials());
  auto stub = ::v1::PodResourcesLister::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  ::v1::GetPodResourcesRequest request;
  request.set_pod_name(pod);
  request.set_pod_namespace(ns);
  ::v1::GetPodResourcesResponse response;
  const grpc::Status status = stub->Get(&context, request, &response);
  if (!status.ok()) {
    const std::string what =
        absl::StrCat("the kubelet's PodResources API at ", socket, " did not answer for pod ", ns,
                     "/", pod, ": ", status.error_message());
    if (status.error_code() == grpc::StatusCode::NOT_FOUND ||
        absl::StrContains(status.error_message(), "not found")) {
      return absl::NotFoundError(what);
    }
    return absl::UnavailableError(what);
  }
  std::vector<std::string> ids;
  for (const auto& container : response.pod_resources().containers()) {
    if (container.name() == own_container) continue;
    for (const auto& devices : container.devices()) {
      const std::string& name = devices.resource_name();
      bool wanted = false;
      for (const std::string& r : resources) {
        wanted = wanted || name == r || absl::StartsWith(name, r + "-");
      }
      if (!wanted) continue;
      for (const std::string& id : devices.device_ids()) ids.push_back(id);
    }
  }
  return ids;
}

std::string GpuVisibilityProblem(int expected, int visible, const std::string& nvml_diagnostic,
                                 const std::string& how_found) {
  if (expected < 0 || visible >= expected) return "";
  std::string line =
      absl::StrCat("cannot see the pod's GPUs: its workload asks for ", expected,
                   " (nvidia.com/gpu), the "
                   "sidecar sees ",
                   visible, how_found.empty() ? "" : absl::StrCat(" (", how_found, ")"));
  if (!nvml_diagnostic.empty()) absl::StrAppend(&line, "; ", nvml_diagnostic);
  absl::StrAppend(&line,
                  "; GPU health checks and metrics cover only what it sees. With the NVIDIA "
                  "device plugin run the operator with --sidecar-gpu-access=visible-devices "
                  "(the sidecar sees the node's GPUs and asks the kubelet which are the pod's); "
                  "with DRA the sidecar shares the workload's resource claims "
                  "(docs/sidecar.md, \"Seeing the pod's GPUs\")");
  return line;
}

}  // namespace cohort
