#pragma once

#include "service/backend/coordination_backend.h"
#include "service/rpc/rpc_call.h"
#include "xla/coordination_service.grpc.pb.h"

namespace cohort {

// xla.coordination.CoordinationService (jaxlib >= 0.10): plain task ids in the default job,
// and every request but RegisterTask names the service incarnation it talks to.
class XlaCoordinationService final
    : public xla::coordination::CoordinationService::CallbackService {
 public:
  // `auth`: the credential every call must carry (null: none).
  XlaCoordinationService(CoordinationBackend* backend, RpcMetrics* metrics,
                         const CallAuth* auth = nullptr)
      : backend_(backend), metrics_(metrics), auth_(auth) {}

  using Ctx = grpc::CallbackServerContext;
  grpc::ServerUnaryReactor* RegisterTask(Ctx*, const xla::coordination::RegisterTaskRequest*,
                                         xla::coordination::RegisterTaskResponse*) override;
  grpc::ServerUnaryReactor* Heartbeat(Ctx*, const xla::coordination::HeartbeatRequest*,
                                      xla::coordination::HeartbeatResponse*) override;
  grpc::ServerUnaryReactor* ShutdownTask(Ctx*, const xla::coordination::ShutdownTaskRequest*,
                                         xla::coordination::ShutdownTaskResponse*) override;
  grpc::ServerUnaryReactor* WatchTasks(Ctx*, const xla::coordination::WatchTasksRequest*,
                                       xla::coordination::WatchTasksResponse*) override;
  grpc::ServerUnaryReactor* InsertKeyValue(Ctx*, const xla::coordination::InsertKeyValueRequest*,
                                           xla::coordination::InsertKeyValueResponse*) override;
  grpc::ServerUnaryReactor* GetKeyValue(Ctx*, const xla::coordination::GetKeyValueRequest*,
                                        xla::coordination::GetKeyValueResponse*) override;
  grpc::ServerUnaryReactor* TryGetKeyValue(Ctx*, const xla::coordination::TryGetKeyValueRequest*,
                                           xla::coordination::TryGetKeyValueResponse*) override;
  grpc::ServerUnaryReactor* IncrementKeyValue(
      Ctx*, const xla::coordination::IncrementKeyValueRequest*,
      xla::coordination::IncrementKeyValueResponse*) override;
  grpc::ServerUnaryReactor* GetKeyValueDir(Ctx*, const xla::coordination::GetKeyValueDirRequest*,
                                           xla::coordination::GetKeyValueDirResponse*) override;
  grpc::ServerUnaryReactor* DeleteKeyValue(Ctx*, const xla::coordination::DeleteKeyValueRequest*,
                                           xla::coordination::DeleteKeyValueResponse*) override;
  grpc::ServerUnaryReactor* Barrier(Ctx*, const xla::coordination::BarrierRequest*,
                                    xla::coordination::BarrierResponse*) override;
  grpc::ServerUnaryReactor* CancelBarrier(Ctx*, const xla::coordination::CancelBarrierRequest*,
                                          xla::coordination::CancelBarrierResponse*) override;
  grpc::ServerUnaryReactor* GetAliveTasks(Ctx*, const xla::coordination::GetAliveTasksRequest*,
                                          xla::coordination::GetAliveTasksResponse*) override;
  grpc::ServerUnaryReactor* PollForError(Ctx*, const xla::coordination::PollForErrorRequest*,
                                         xla::coordination::PollForErrorResponse*) override;
  grpc::ServerUnaryReactor* ReportErrorToService(
      Ctx*, const xla::coordination::ReportErrorToServiceRequest*,
      xla::coordination::ReportErrorToServiceResponse*) override;

 private:
  RpcCall* NewCall(Ctx* ctx, const char* method);
  // The service-incarnation check every request but RegisterTask gets.
  absl::Status Validate(const xla::coordination::Incarnations& incarnations) const;
  absl::StatusOr<TaskName> Task(int32_t id) const;
  // The task, refused (ABORTED) when the request carries another incarnation than its own.
  absl::StatusOr<TaskName> Task(int32_t id,
                                const xla::coordination::Incarnations& incarnations) const;

  CoordinationBackend* const backend_;
  RpcMetrics* const metrics_;
  const CallAuth* const auth_;
};

}  // namespace cohort
