#pragma once

#include <atomic>
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
  // How long a call to the scheduler keeps trying while the coordinator cannot be reached
  // (restarting, say): calls wait for it and are sent again, numbered where a repeat must not
  // take effect twice (cohort-call metadata).
  absl::Duration reconnect = absl::Minutes(2);
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
  // `previous`: whether the last task succeeded, and its error; `operation`: that task's
  // ExecuteTaskRequest.operation.
  // `leaving`: this worker goes away after the report (it gets no new task).
  absl::Status ReadyForNewTask(std::optional<std::pair<bool, std::string>> previous,
                               OperationId operation = 0, bool leaving = false);
  absl::StatusOr<v1::TaskInfoReply> TaskInfo();
  absl::StatusOr<v1::SchedulerInfoReply> SchedulerInfo();
  absl::StatusOr<bool> KillWorkers();

 private:
  TaskClient() = default;
  std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout) const;
  // A call to the scheduler, sent again while the coordinator is unreachable (up to
  // `reconnect`); `numbered`: with the next call number.
  template <typename Request, typename Reply>
  grpc::Status CallScheduler(grpc::Status (::Scheduler::Stub::*method)(grpc::ClientContext*,
                                                                       const Request&, Reply*),
                             const Request& request, Reply* reply, bool numbered);

  std::unique_ptr<::Scheduler::Stub> scheduler_;
  std::unique_ptr<v1::LocalStore::Stub> local_;
  WorkerId id_ = 0;
  StoreId store_ = 0;
  std::string address_;
  absl::Duration reconnect_;
  std::atomic<uint64_t> next_call_{0};
};

}  // namespace cohort::runtime
