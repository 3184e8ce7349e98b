// Follows each running job's coordinator through cohort.v1.Coordinator/GetClusterSnapshot,
// so the operator learns of a task in error (a sidecar's report, a missed heartbeat) from
// the coordinator itself, within one poll interval, instead of waiting for pods to exit.
// One thread per watched coordinator; a change that matters (tasks registered, tasks in
// error) calls `on_change` with the job's key. Each call carries the job's token (the
// coordinator refuses calls without it) and, for a job with TLS, goes over mutual TLS with the
// job's client certificate.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "operator/plan/job_tls.h"
#include "operator/plan/observed.h"

namespace cohort::controller {

// What the operator presents to a job's coordinator.
struct CoordinatorCredentials {
  std::string token;                   // "" for none
  std::optional<JobCertificates> tls;  // the job's, when it runs with TLS
  std::string server_name;             // the name its certificate carries
  bool operator==(const CoordinatorCredentials& o) const {
    return token == o.token && server_name == o.server_name &&
           tls.has_value() == o.tls.has_value() &&
           (!tls || (tls->ca_cert == o.tls->ca_cert && tls->client_cert == o.tls->client_cert &&
                     tls->client_key == o.tls->client_key));
  }
};

class CoordinatorWatcher {
 public:
  CoordinatorWatcher(absl::Duration interval, std::function<void(const std::string&)> on_change);
  ~CoordinatorWatcher();
  CoordinatorWatcher(const CoordinatorWatcher&) = delete;
  CoordinatorWatcher& operator=(const CoordinatorWatcher&) = delete;

  // Follows the coordinator of job `key`'s gang `restart` at `address` (host:port), calling
  // with `credentials`. A watch of the same key at another address, gang or credentials is
  // replaced. `task_runtime`: also follow the task runtime's scheduler (TaskInfo).
  void Watch(const std::string& key, const std::string& address, int restart,
             const CoordinatorCredentials& credentials, bool task_runtime = false);
  void Unwatch(const std::string& key);
  // The latest snapshot of that gang's coordinator; nullopt before the first answer.
  std::optional<CoordinatorView> View(const std::string& key, int restart) const;
  size_t Watched() const;
  void StopAll();

 private:
  struct Follow;
  void Run(const std::shared_ptr<Follow>& follow);
  void Retire(const std::shared_ptr<Follow>& old);

  const absl::Duration interval_;
  const std::function<void(const std::string&)> on_change_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Follow>> follows_;
  std::vector<std::shared_ptr<Follow>> retired_;  // stopping; joined once done
};

}  // namespace cohort::controller
