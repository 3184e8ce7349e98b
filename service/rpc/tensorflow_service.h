#pragma once

#include "service/backend/coordination_backend.h"
#include "service/rpc/rpc_call.h"
#include "tensorflow/coordination_service.grpc.pb.h"

namespace cohort {

// tensorflow.CoordinationService (TensorFlow's TSL agent, jaxlib up to 0.9), with the legacy
// method names and fields of older agents. Translation only.
class TensorflowCoordinationService final
    : public tensorflow::CoordinationService::CallbackService {
 public:
  // `auth`: the credential every call must carry (null: none).
  TensorflowCoordinationService(CoordinationBackend* backend, RpcMetrics* metrics,
                                const CallAuth* auth = nullptr)
      : backend_(backend), metrics_(metrics), auth_(auth) {}

  using Ctx = grpc::CallbackServerContext;
  grpc::ServerUnaryReactor* RegisterTask(Ctx*, const tensorflow::RegisterTaskRequest*,
                                         tensorflow::RegisterTaskResponse*) override;
  grpc::ServerUnaryReactor* RegisterWorker(Ctx*, const tensorflow::RegisterTaskRequest*,
                                           tensorflow::RegisterTaskResponse*) override;
  grpc::ServerUnaryReactor* Heartbeat(Ctx*, const tensorflow::HeartbeatRequest*,
                                      tensorflow::HeartbeatResponse*) override;
  grpc::ServerUnaryReactor* WaitForAllTasks(Ctx*, const tensorflow::WaitForAllTasksRequest*,
                                            tensorflow::WaitForAllTasksResponse*) override;
  grpc::ServerUnaryReactor* ShutdownTask(Ctx*, const tensorflow::ShutdownTaskRequest*,
                                         tensorflow::ShutdownTaskResponse*) override;
  grpc::ServerUnaryReactor* ResetTask(Ctx*, const tensorflow::ResetTaskRequest*,
                                      tensorflow::ResetTaskResponse*) override;
  grpc::ServerUnaryReactor* ReportErrorToTask(Ctx*, const tensorflow::ReportErrorToTaskRequest*,
                                              tensorflow::ReportErrorToTaskResponse*) override;
  grpc::ServerUnaryReactor* ReportErrorToAgent(Ctx*, const tensorflow::ReportErrorToTaskRequest*,
                                               tensorflow::ReportErrorToTaskResponse*) override;
  grpc::ServerUnaryReactor* ReportErrorToService(
      Ctx*, const tensorflow::ReportErrorToServiceRequest*,
      tensorflow::ReportErrorToServiceResponse*) override;
  grpc::ServerUnaryReactor* GetTaskState(Ctx*, const tensorflow::GetTaskStateRequest*,
                                         tensorflow::GetTaskStateResponse*) override;
  grpc::ServerUnaryReactor* WatchJobState(Ctx*, const tensorflow::WatchJobStateRequest*,
                                          tensorflow::WatchJobStateResponse*) override;
  grpc::ServerUnaryReactor* InsertKeyValue(Ctx*, const tensorflow::InsertKeyValueRequest*,
                                           tensorflow::InsertKeyValueResponse*) override;
  grpc::ServerUnaryReactor* GetKeyValue(Ctx*, const tensorflow::GetKeyValueRequest*,
                                        tensorflow::GetKeyValueResponse*) override;
  grpc::ServerUnaryReactor* TryGetKeyValue(Ctx*, const tensorflow::TryGetKeyValueRequest*,
                                           tensorflow::TryGetKeyValueResponse*) override;
  grpc::ServerUnaryReactor* GetKeyValueDir(Ctx*, const tensorflow::GetKeyValueDirRequest*,
                                           tensorflow::GetKeyValueDirResponse*) override;
  grpc::ServerUnaryReactor* DeleteKeyValue(Ctx*, const tensorflow::DeleteKeyValueRequest*,
                                           tensorflow::DeleteKeyValueResponse*) override;
  grpc::ServerUnaryReactor* IncrementKeyValue(Ctx*, const tensorflow::IncrementKeyValueRequest*,
                                              tensorflow::IncrementKeyValueResponse*) override;
  grpc::ServerUnaryReactor* Barrier(Ctx*, const tensorflow::BarrierRequest*,
                                    tensorflow::BarrierResponse*) override;
  grpc::ServerUnaryReactor* CancelBarrier(Ctx*, const tensorflow::CancelBarrierRequest*,
                                          tensorflow::CancelBarrierResponse*) override;
  grpc::ServerUnaryReactor* GetAliveTasks(Ctx*, const tensorflow::GetAliveTasksRequest*,
                                          tensorflow::GetAliveTasksResponse*) override;
  grpc::ServerUnaryReactor* PollForError(Ctx*, const tensorflow::PollForErrorRequest*,
                                         tensorflow::PollForErrorResponse*) override;

 private:
  RpcCall* NewCall(Ctx* ctx, const char* method);
  grpc::ServerUnaryReactor* Register(Ctx* ctx, const char* method,
                                     const tensorflow::RegisterTaskRequest* request,
                                     tensorflow::RegisterTaskResponse* response);
  grpc::ServerUnaryReactor* ReportToTask(Ctx* ctx, const char* method,
                                         const tensorflow::ReportErrorToTaskRequest* request);
  absl::StatusOr<TaskName> Resolve(const tensorflow::CoordinatedTask& task) const;
  absl::StatusOr<TaskName> ResolveLegacy(bool has_current,
                                         const tensorflow::CoordinatedTask& current,
                                         const std::string& job, int32_t task) const;
  // INVALID_ARGUMENT when the request left the task out.
  absl::StatusOr<TaskName> Resolve(bool present, const tensorflow::CoordinatedTask& task,
                                   const char* field) const;
  static void FillStateInfo(const TaskStateInfo& info, tensorflow::CoordinatedTaskStateInfo* out);

  CoordinationBackend* const backend_;
  RpcMetrics* const metrics_;
  const CallAuth* const auth_;
};

}  // namespace cohort
