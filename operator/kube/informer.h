// A cache of one resource type kept current by list-then-watch: it lists, watches from the
// list's resourceVersion (with bookmarks, so a reconnect resumes close to now), lists again
// when the API server says the version is gone (410), and backs off on errors. Handlers run
// on the informer's thread and should only enqueue work.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "operator/kube/kube_client.h"

namespace cohort::kube {

class Informer {
 public:
  struct Options {
    std::string namespace_name;  // "" for every namespace
    ListOptions selector;        // label/field selector scoping the cache
    std::string index_label;     // objects are also indexed by this label's value ("": none)
    int watch_timeout_seconds = 300;
    // After a failed list or watch the informer waits this long, doubling up to max_backoff.
    std::chrono::milliseconds initial_backoff{500};
    std::chrono::milliseconds max_backoff{30000};
  };
  struct Handlers {
    std::function<void(const json&)> on_upsert;  // added or changed (also after every list)
    std::function<void(const json&)> on_delete;
    std::function<void(const std::string& why)> on_watch_restart;  // a watch ended in error
  };

  Informer(Client* client, Resource resource, Options options, Handlers handlers);
  ~Informer();
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  void Start();
  void Stop();  // returns once the thread ended; the client must be shut down first or soon
  bool HasSynced() const { return synced_.load(); }
  // Waits until the first list is in the cache or `stop` becomes true.
  bool WaitForSync(const std::atomic<bool>& stop) const;

  std::optional<json> Get(const std::string& ns, const std::string& name) const;
  // Objects in `ns` whose index label has `value`.
  std::vector<json> ByIndex(const std::string& ns, const std::string& value) const;
  std::vector<json> All() const;
  size_t Size() const;
  // Puts an object we just wrote into the cache unless the cache already has a newer one, so
  // the next reconcile does not act on what it already changed.
  void Upsert(const json& object);

 private:
  void Run();
  absl::Status ListAndReplace(std::string* resource_version);
  void Apply(const WatchEvent& event, std::string* resource_version);
  void PutLocked(const json& object);
  void EraseLocked(const std::string& key);
  std::string IndexKey(const json& object) const;

  Client* client_;
  const Resource resource_;
  const Options options_;
  const Handlers handlers_;

  mutable absl::Mutex mu_;
  mutable absl::CondVar cv_;
  std::map<std::string, json> objects_;                 // "ns/name" -> object
  std::map<std::string, std::set<std::string>> index_;  // "ns/value" -> keys
  std::atomic<bool> synced_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// True when resource version `a` is newer than `b` (both as the decimal etcd revisions the API
// server uses; anything unparsable counts as newer, so it is never ignored).
bool NewerResourceVersion(const std::string& a, const std::string& b);

}  // namespace cohort::kube
