// FakeClient: the Client interface over objects kept in memory, with the API server's
// semantics the operator relies on (resource versions and conditional writes, the status
// subresource, generation, finalizers and deletionTimestamp, label and field selectors, merge
// and JSON patches, watches from a resource version), every call recorded, and failures
// injected per verb. For tests of informers, leader election and the reconcile loop without a
// cluster; the e2e tests run the real API server.
//
// Hand-written: client-go's fake clientset is Go, and no C++ Kubernetes client ships a fake.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "operator/kube/kube_client.h"

namespace cohort::kube {

class FakeClient : public Client {
 public:
  // A call as the API server would have seen it: "create pods ml/train-worker-0",
  // "update coordinatedjobs/status ml/train".
  struct Action {
    std::string verb;  // get, list, watch, create, update, patch, delete
    std::string resource;
    std::string subresource;
    std::string ns;
    std::string name;
    std::string ToString() const;
  };

  // `clock` stamps creationTimestamp and deletionTimestamp (nullptr: the real clock).
  explicit FakeClient(const Clock* clock = nullptr);

  // Puts an object in as if created (uid, resourceVersion, generation set when missing), without
  // recording an action: a test's starting state. `r` says where it lives.
  json Add(const Resource& r, json object);
  // The stored object, or nothing (no action recorded).
  std::optional<json> Peek(const Resource& r, const std::string& ns, const std::string& name);
  // Every call so far; the writes only (create, update, patch, delete), as strings.
  std::vector<Action> Actions() const;
  std::vector<std::string> Writes() const;
  void ClearActions();
  // The next `times` calls of `verb` on `resource` ("*" for any) fail with `status`, changing
  // nothing.
  void FailNext(const std::string& verb, const std::string& resource, absl::Status status,
                int times = 1);
  // The resource is not served (as a CRD that is not installed): every call is NotFound.
  void Unserve(const Resource& r);
  // Waits until at least `watches` watches are open and every watch has delivered every change
  // made so far (their callbacks returned): informers' caches then hold what was written. False
  // after `timeout`.
  bool WaitForWatches(size_t watches, absl::Duration timeout = absl::Seconds(10));
  int ActiveWatches() const;

  absl::StatusOr<json> Send(const Call& call) override;
  // Delivers the changes after `resource_version` that match, then the new ones as they are
  // made, until Shutdown() (Cancelled). `timeout_seconds` is not enforced: a fake watch ends only
  // when the client shuts down.
  absl::Status Watch(const Resource& r, const std::string& ns, const ListOptions& options,
                     const std::string& resource_version, int timeout_seconds,
                     const std::function<void(const WatchEvent&)>& on_event) override;
  void Shutdown() override;

 private:
  struct Change {
    int64_t version;
    std::string resource;  // ResourceKey
    std::string type;      // ADDED, MODIFIED, DELETED
    json object;
  };
  struct Failure {
    std::string verb, resource;
    absl::Status status;
    int times;
  };

  static std::string ResourceKey(const Resource& r) { return r.api_path + "/" + r.plural; }
  // Send's verbs, each as the API server does it, under mu_ once the call is recorded.
  absl::StatusOr<json> GetLocked(const Call& call);
  absl::StatusOr<json> ListLocked(const Call& call);
  absl::StatusOr<json> CreateLocked(const Call& call);
  absl::StatusOr<json> ReplaceLocked(const Call& call);
  absl::StatusOr<json> PatchLocked(const Call& call);
  absl::StatusOr<json> DeleteLocked(const Call& call);
  // Records the call (as BeginLocked below).
  absl::Status BeginLocked(const Call& call);
  // Records the call and returns the failure it must give, if any.
  absl::Status BeginLocked(const std::string& verb, const Resource& r, const std::string& ns,
                           const std::string& name, const std::string& subresource = "");
  json StampLocked(const Resource& r, json object, const std::string& ns);
  // Stores `updated` in place of `current` (same key): a new version, generation bumped when
  // anything but metadata and status changed, deleted when its last finalizer went while it
  // was being deleted.
  json CommitLocked(const Resource& r, const std::string& key, const json& current, json updated);
  void RecordLocked(const Resource& r, const std::string& type, const json& object);
  std::string NowText() const;

  const Clock* clock_;
  RealClock real_clock_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;                // a change, a watch caught up, or Shutdown
  std::map<std::string, json> objects_;  // "<resource>|<ns>|<name>"
  std::vector<Change> log_;
  int64_t version_ = 1000;
  int64_t next_uid_ = 1;
  std::vector<Action> actions_;
  std::vector<Failure> failures_;
  std::vector<std::string> unserved_;
  std::map<int, size_t> watches_;  // watch id -> changes of log_ delivered
  int next_watch_ = 0;
  bool shut_down_ = false;
};

// Whether `object` matches a label selector ("a=b,c!=d,e,!f,g in (x,y),h notin (z)") and a
// field selector ("metadata.name=x,status.phase!=Running"); InvalidArgument for one that does
// not parse.
absl::StatusOr<bool> MatchesSelectors(const json& object, const ListOptions& options);

}  // namespace cohort::kube
