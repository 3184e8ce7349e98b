// A Kubernetes REST client over cpprestsdk: the verbs cohort-operator uses (get, list, watch,
// create, replace, patch, delete) on any resource, with objects as JSON. Errors come back
// as absl::Status with the API server's message: NotFound (404), AlreadyExists (409 with
// reason AlreadyExists), Aborted (409 conflict), OutOfRange (410 Gone), InvalidArgument (400,
// 422), PermissionDenied (403), Unauthenticated (401), ResourceExhausted (429), Unavailable
// (5xx or no connection).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "operator/kube/kube_config.h"

namespace cohort::kube {

using json = nlohmann::json;

// A resource type: where it lives in the API and whether it has a namespace.
struct Resource {
  std::string api_path;  // "/api/v1", "/apis/cohort.dev/v1alpha1"
  std::string plural;    // "pods"
  std::string kind;      // "Pod"
  bool namespaced = true;
};

inline const Resource kPods{"/api/v1", "pods", "Pod", true};
inline const Resource kServices{"/api/v1", "services", "Service", true};
inline const Resource kConfigMaps{"/api/v1", "configmaps", "ConfigMap", true};
inline const Resource kSecrets{"/api/v1", "secrets", "Secret", true};
inline const Resource kPersistentVolumeClaims{"/api/v1", "persistentvolumeclaims",
                                              "PersistentVolumeClaim", true};
inline const Resource kNetworkPolicies{"/apis/networking.k8s.io/v1", "networkpolicies",
                                       "NetworkPolicy", true};
inline const Resource kEvents{"/api/v1", "events", "Event", true};
inline const Resource kLeases{"/apis/coordination.k8s.io/v1", "leases", "Lease", true};
// cert-manager's (--job-tls=cert-manager): created, never watched.
inline const Resource kCertificates{"/apis/cert-manager.io/v1", "certificates", "Certificate",
                                    true};
// Kueue's (--kueue): the jobs' Workloads, and the ResourceFlavors their admissions name.
inline const Resource kWorkloads{"/apis/kueue.x-k8s.io/v1beta2", "workloads", "Workload", true};
inline const Resource kResourceFlavors{"/apis/kueue.x-k8s.io/v1beta2", "resourceflavors",
                                       "ResourceFlavor", false};
// A queued job's priority (kueue::Priority): read when its Workload is made.
inline const Resource kWorkloadPriorityClasses{
    "/apis/kueue.x-k8s.io/v1beta2", "workloadpriorityclasses", "WorkloadPriorityClass", false};
inline const Resource kPriorityClasses{"/apis/scheduling.k8s.io/v1", "priorityclasses",
                                       "PriorityClass", false};
inline const Resource kStorageClasses{"/apis/storage.k8s.io/v1", "storageclasses", "StorageClass",
                                      false};
// spec.gangScheduling's PodGroups: created, never watched.
inline const Resource kSchedulerPluginsPodGroups{"/apis/scheduling.x-k8s.io/v1alpha1", "podgroups",
                                                 "PodGroup", true};
inline const Resource kVolcanoPodGroups{"/apis/scheduling.volcano.sh/v1beta1", "podgroups",
                                        "PodGroup", true};
// Kubernetes' own gang scheduling (podGroup Kubernetes): Workloads created, PodGroups created
// and watched, in 1.37's version or 1.36's, whichever the API server serves.
inline const Resource kKubernetesPodGroups{"/apis/scheduling.k8s.io/v1beta1", "podgroups",
                                           "PodGroup", true};
inline const Resource kKubernetesWorkloads{"/apis/scheduling.k8s.io/v1beta1", "workloads",
                                           "Workload", true};
inline const Resource kKubernetesPodGroupsV1Alpha2{"/apis/scheduling.k8s.io/v1alpha2", "podgroups",
                                                   "PodGroup", true};
inline const Resource kKubernetesWorkloadsV1Alpha2{"/apis/scheduling.k8s.io/v1alpha2", "workloads",
                                                   "Workload", true};
inline const Resource kCoordinatedJobs{"/apis/cohort.dev/v1alpha1", "coordinatedjobs",
                                       "CoordinatedJob", true};

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  int64_t limit = 0;           // page size; 0: everything in one response
  std::string continue_token;  // from the previous page's metadata.continue
};

struct DeleteOptions {
  std::optional<int64_t> grace_period_seconds;
  std::string propagation_policy;  // "Background", "Foreground", "Orphan" or "" (default)
  std::string precondition_uid;    // delete only this incarnation of the name
};

enum class PatchType { kMerge, kStrategicMerge, kJsonPatch };

struct WatchEvent {
  std::string type;  // ADDED, MODIFIED, DELETED, BOOKMARK
  json object;
};

// One call of a verb other than watch, as a Client implementation receives it.
struct Call {
  enum class Verb { kGet, kList, kCreate, kReplace, kPatch, kDelete };
  Call(Verb verb, const Resource& resource, std::string ns, std::string name)
      : verb(verb), resource(resource), ns(std::move(ns)), name(std::move(name)) {}

  Verb verb;
  const Resource& resource;
  std::string ns;
  std::string name;
  std::string subresource;     // replace, patch: "status", or "" for the object
  const json* body = nullptr;  // create, replace: the object; patch: the patch
  PatchType patch_type = PatchType::kMerge;
  ListOptions list_options;
  DeleteOptions delete_options;
};

// The verbs cohort-operator uses, on any resource. KubeClient speaks them to an API server;
// FakeClient (fake_client.h) keeps objects in memory and records every call, so informers,
// leader election and the reconcile loop are tested without a cluster. Both implement Send (every
// verb but watch, as one Call), Watch and Shutdown; the verbs below only build the Call.
class Client {
 public:
  virtual ~Client() = default;

  absl::StatusOr<json> Get(const Resource& r, const std::string& ns, const std::string& name) {
    return Send(Call(Call::Verb::kGet, r, ns, name));
  }
  // A whole list (following `continue` when options.limit pages it); the returned object's
  // metadata.resourceVersion is the one to watch from.
  absl::StatusOr<json> List(const Resource& r, const std::string& ns, const ListOptions& options) {
    Call call(Call::Verb::kList, r, ns, "");
    call.list_options = options;
    return Send(call);
  }
  absl::StatusOr<json> Create(const Resource& r, const std::string& ns, const json& object) {
    Call call(Call::Verb::kCreate, r, ns, "");
    call.body = &object;
    return Send(call);
  }
  // PUT of the whole object (or of its `subresource`, e.g. "status"; "" for the object); the
  // object's metadata.resourceVersion makes it conditional.
  absl::StatusOr<json> Replace(const Resource& r, const std::string& ns, const std::string& name,
                               const json& object, const std::string& subresource = "") {
    Call call(Call::Verb::kReplace, r, ns, name);
    call.body = &object;
    call.subresource = subresource;
    return Send(call);
  }
  absl::StatusOr<json> Patch(const Resource& r, const std::string& ns, const std::string& name,
                             PatchType type, const json& patch,
                             const std::string& subresource = "") {
    Call call(Call::Verb::kPatch, r, ns, name);
    call.body = &patch;
    call.patch_type = type;
    call.subresource = subresource;
    return Send(call);
  }
  absl::Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                      const DeleteOptions& options = {}) {
    Call call(Call::Verb::kDelete, r, ns, name);
    call.delete_options = options;
    return Send(call).status();
  }
  // The verbs' work: the object the server answers with (for a delete, whatever it sent).
  virtual absl::StatusOr<json> Send(const Call& call) = 0;
  // Streams changes after `resource_version` to `on_event` until the server ends the watch
  // (OK), an error (OutOfRange when the version is too old: list again), or Shutdown()
  // (Cancelled). Bookmarks are asked for and delivered as BOOKMARK events.
  virtual absl::Status Watch(const Resource& r, const std::string& ns, const ListOptions& options,
                             const std::string& resource_version, int timeout_seconds,
                             const std::function<void(const WatchEvent&)>& on_event) = 0;
  // Ends every watch in progress and makes later calls fail with Cancelled.
  virtual void Shutdown() = 0;
};

class KubeClient : public Client {
 public:
  struct Options {
    std::chrono::seconds request_timeout{30};
    std::string user_agent = "cohort-operator";
  };

  explicit KubeClient(KubeConfig config) : KubeClient(std::move(config), Options{}) {}
  KubeClient(KubeConfig config, Options options);
  ~KubeClient();
  KubeClient(const KubeClient&) = delete;
  KubeClient& operator=(const KubeClient&) = delete;

  const KubeConfig& config() const { return config_; }

  absl::StatusOr<json> Send(const Call& call) override;
  absl::Status Watch(const Resource& r, const std::string& ns, const ListOptions& options,
                     const std::string& resource_version, int timeout_seconds,
                     const std::function<void(const WatchEvent&)>& on_event) override;
  void Shutdown() override;

  // "<api_path>/namespaces/<ns>/<plural>[/<name>][/<subresource>]"
  static std::string Path(const Resource& r, const std::string& ns, const std::string& name = "",
                          const std::string& subresource = "");

 private:
  struct Impl;
  // Every page of a list, merged.
  absl::StatusOr<json> ListAll(const Call& call);
  absl::StatusOr<json> Request(const std::string& method, const std::string& path_and_query,
                               const std::string& content_type, const std::string& body);

  KubeConfig config_;
  Options options_;
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> shut_down_{false};
};

// The Status object the API server sends with an error, as an absl::Status.
absl::Status StatusFromResponse(int http_status, const std::string& body);

// Convenience for an object's metadata fields ("" when missing).
std::string Name(const json& object);
std::string Namespace(const json& object);
std::string Uid(const json& object);
std::string ResourceVersion(const json& object);

}  // namespace cohort::kube
