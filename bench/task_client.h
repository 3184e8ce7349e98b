// The simulated tasks of one job, over one coordination protocol. Every call is async
// (gRPC's callback API): no thread per task, so one process can be 16,000 tasks. The same
// interface drives cohort and jaxlib's own service (xla.coordination), and cohort over the
// tensorflow protocol.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "grpcpp/grpcpp.h"

namespace cohort::bench {

using Done = std::function<void(const grpc::Status&)>;
using ValueDone = std::function<void(const grpc::Status&, size_t value_bytes)>;
// A call in flight; TryCancel() on it cancels a parked call. Valid after the call ended.
using CallHandle = std::shared_ptr<grpc::ClientContext>;

class TaskClient {
 public:
  virtual ~TaskClient() = default;

  virtual CallHandle RegisterTask(int task, Done done) = 0;
  virtual CallHandle Heartbeat(int task, Done done) = 0;
  // A barrier over every task of the job.
  virtual CallHandle Barrier(int task, const std::string& id, Done done) = 0;
  virtual CallHandle PollForError(int task, Done done) = 0;
  // Parks until the job's task states change: WatchTasks (xla) or WatchJobState
  // (tensorflow), at the version WatchVersion() read.
  virtual CallHandle WatchState(int task, Done done) = 0;
  virtual CallHandle Insert(int task, const std::string& key, const std::string& value,
                            Done done) = 0;
  virtual CallHandle TryGet(int task, const std::string& key, ValueDone done) = 0;
  virtual CallHandle BlockingGet(int task, const std::string& key, ValueDone done) = 0;
  virtual CallHandle Delete(int task, const std::string& key, Done done) = 0;
  // Reads the current task-state version (blocking); WatchState parks at it.
  virtual bool WatchVersion(int task) = 0;
};

// protocol: "xla" (xla.coordination.CoordinationService) or "tensorflow"
// (tensorflow.CoordinationService, tasks of `job`). Tasks are spread over `channels` HTTP/2
// connections (task % channels).
std::unique_ptr<TaskClient> MakeTaskClient(const std::string& protocol, const std::string& address,
                                           int channels, const std::string& job);

// A channel of its own (its own connection) with no message size limit.
std::shared_ptr<grpc::Channel> OwnChannel(const std::string& address, int index);

}  // namespace cohort::bench
