#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cohort/runtime/v1/local_store.grpc.pb.h"
#include "cohort/runtime/v1/services.grpc.pb.h"
#include "runtime/scheduler/ids.h"

namespace cohort::runtime {

struct TaskClientOptions {
  std::string scheduler;  // the coordinator's gRPC HOST:PORT
  std::string objstore;   // this node's object store
  std::string node_ip = "127.0.0.1";
  bool is_driver = true;
  std::string worker_address;  // a worker's own WorkerService address
  std::string auth_token;
};

// The task runtime from a driver's or a worker's side: registration, submission, puts and
// gets through the node's object store, counts. Thread-safe (each call is its own RPC).
class TaskClient {
 public:
  // Registers as a driver or worker.
  static absl::StatusOr<std::unique_ptr<TaskClient>> Connect(const TaskClientOptions& options);

  WorkerId id() const { return id_; }
  StoreId store() const { return store_; }
  const std::string& address() const { return address_; }

  // Submits a task; while no worker has its function yet, asks again for up to `wait`.
  absl::StatusOr<std::vector<ObjectId>> Submit(const std::string& function,
                                               const std::vector<v1::Value>& args,
                                               absl::Duration wait = absl::Seconds(30));
  // A new object holding `value`, stored at this node's store.
  absl::StatusOr<ObjectId> Put(const v1::Obj& value);
  // Stores `value` as object `id` (a task's result) at this node's store.
  absl::Status Store(ObjectId id, const v1::Obj& value);
  // The object's value, brought to this node's store first. An object that holds an error
  // (its task failed, or it was lost) is returned as ABORTED with the error's message.
  absl::StatusOr<v1::Obj> Get(ObjectId id, absl::Duration timeout = absl::Minutes(5));
  absl::Status Release(const std::vector<ObjectId>& ids);
  absl::Status Retain(const std::vector<ObjectId>& ids);
  absl::Status Alias(ObjectId alias, ObjectId target);
  absl::Status RegisterFunction(const std::string& name, uint64_t num_return_vals);
  absl::Status ReadyForNewTask(std::optional<std::pair<bool, std::string>> previous);
  absl::StatusOr<v1::TaskInfoReply> TaskInfo();
  absl::StatusOr<v1::SchedulerInfoReply> SchedulerInfo();
  absl::StatusOr<bool> KillWorkers();

 private:
  TaskClient() = default;
  std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout) const;

  std::unique_ptr<::Scheduler::Stub> scheduler_;
  std::unique_ptr<v1::LocalStore::Stub> local_;
  WorkerId id_ = 0;
  StoreId store_ = 0;
  std::string address_;
};

}  // namespace cohort::runtime
