#pragma once

#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cohort/runtime/v1/services.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "runtime/client/task_client.h"

namespace cohort::runtime {

struct CppWorkerOptions {
  std::string scheduler;
  std::string objstore;
  std::string listen_host = "127.0.0.1";  // the worker serves on an unused port of this host
  std::string auth_token;                 // sent on every call, and required of every call when set
  // Serving beyond loopback without a token is refused unless this says so (--insecure-no-auth).
  bool insecure_no_auth = false;
  // The largest message the scheduler may send (a task with its inline arguments).
  int max_message_bytes = 256 << 20;
};

// One C++ worker: serves WorkerService, registers the built-in functions, and runs the tasks
// it is sent one at a time, its arguments read from and its result stored in its node's store.
// Functions exported for other workers (Python's pickled ones) are not its to run: it takes
// them and registers nothing.
class CppWorker final : public ::WorkerService::Service {
 public:
  explicit CppWorker(CppWorkerOptions options);
  ~CppWorker() override;

  absl::Status Start();
  void Stop();
  // Drains (SIGTERM, the pod going away): finishes the task at hand, tells the scheduler it
  // leaves (it sends no new task), then ends.
  void Leave();
  // Returns once the worker stops: Stop, Die, or the scheduler no longer knowing it.
  absl::Status Wait();

  WorkerId id() const { return client_ ? client_->id() : 0; }

  grpc::Status ExecuteTask(grpc::ServerContext* ctx, const v1::ExecuteTaskRequest* request,
                           v1::ExecuteTaskReply* reply) override;
  grpc::Status ImportFunction(grpc::ServerContext* ctx, const v1::ImportFunctionRequest* request,
                              v1::ImportFunctionReply* reply) override;
  grpc::Status ImportReusableVariable(grpc::ServerContext* ctx,
                                      const v1::ImportReusableVariableRequest* request,
                                      v1::AckReply* reply) override;
  grpc::Status Die(grpc::ServerContext* ctx, const v1::DieRequest* request,
                   v1::DieReply* reply) override;
  grpc::Status Alive(grpc::ServerContext* ctx, const v1::AliveRequest* request,
                     v1::AckReply* reply) override;

 private:
  static constexpr size_t kRememberedOperations = 1024;

  void Run();
  // Runs one task; the error message when it fails.
  std::optional<std::string> Execute(const v1::Task& task);
  grpc::Status Refused(const grpc::ServerContext& ctx) const;

  const CppWorkerOptions options_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<TaskClient> client_;
  absl::Mutex mu_;
  std::deque<v1::ExecuteTaskRequest> tasks_ ABSL_GUARDED_BY(mu_);
  // Operations received and not yet reported, and the last ones reported (oldest first): an
  // ExecuteTask for any of them is a repeat from a restarted coordinator.
  absl::flat_hash_set<OperationId> held_ ABSL_GUARDED_BY(mu_);
  std::deque<OperationId> reported_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool leaving_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status ended_ ABSL_GUARDED_BY(mu_);
  std::thread runner_;
};

}  // namespace cohort::runtime
