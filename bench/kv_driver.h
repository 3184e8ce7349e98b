// A key-value system as the kv scenario drives it: cohort or jaxlib's service through a
// TaskClient, or etcd through its own v3 gRPC API. Each client runs a closed loop, so a
// driver sees at most one operation per client at a time.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "bench/task_client.h"

namespace cohort::bench {

// ok, and the seconds from the start of the wait until the value arrived.
using WaitDone = std::function<void(bool ok, double seconds)>;

class KvDriver {
 public:
  virtual ~KvDriver() = default;
  virtual void Set(int client, const std::string& key, const std::string& value, Done done) = 0;
  virtual void Get(int client, const std::string& key, ValueDone done) = 0;
  // One blocking-get cycle: a wait for `key` (which does not exist), the write of `value`
  // that ends it, and the clean-up that makes the next wait real. The coordination
  // protocols park a GetKeyValue, write right behind it and delete the key; etcd creates a
  // watch, writes once the watch is confirmed, and cancels the watch.
  virtual void WaitCycle(int client, const std::string& key, const std::string& value,
                         WaitDone done) = 0;
};

// Client c acts as task c % tasks.
std::unique_ptr<KvDriver> MakeTaskKvDriver(TaskClient* tasks, int num_tasks);
std::unique_ptr<KvDriver> MakeEtcdKvDriver(const std::string& address, int channels, int clients);

}  // namespace cohort::bench
