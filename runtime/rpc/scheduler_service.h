#pragma once

#include "cohort/runtime/v1/services.grpc.pb.h"
#include "common/durability_gate.h"
#include "common/grpc_auth.h"
#include "runtime/rpc/task_messages.h"
#include "runtime/scheduler/task_scheduler.h"

namespace cohort::runtime {

// The task runtime protocol's Scheduler service (/Scheduler/<Method>) over the scheduler
// state machine. Every handler answers at once: the state machine never waits.
// IncrementCount and DecrementCount, declared but never given a meaning by the original,
// answer UNIMPLEMENTED, naming IncrementRefCount and DecrementRefCount.
class SchedulerService final : public ::Scheduler::CallbackService {
 public:
  // `auth`: the credential every call must carry (null: none). `gate`: answers go out once
  // the changes before them are on disk (the coordinator's durable state; null: at once).
  SchedulerService(TaskScheduler* scheduler, const CallAuth* auth, DurabilityGate* gate = nullptr)
      : scheduler_(scheduler), auth_(auth), gate_(gate) {}

  grpc::ServerUnaryReactor* RegisterWorker(grpc::CallbackServerContext* ctx,
                                           const v1::RegisterWorkerRequest* request,
                                           v1::RegisterWorkerReply* reply) override;
  grpc::ServerUnaryReactor* RegisterObjStore(grpc::CallbackServerContext* ctx,
                                             const v1::RegisterObjStoreRequest* request,
                                             v1::RegisterObjStoreReply* reply) override;
  grpc::ServerUnaryReactor* RegisterFunction(grpc::CallbackServerContext* ctx,
                                             const v1::RegisterFunctionRequest* request,
                                             v1::AckReply* reply) override;
  grpc::ServerUnaryReactor* SubmitTask(grpc::CallbackServerContext* ctx,
                                       const v1::SubmitTaskRequest* request,
                                       v1::SubmitTaskReply* reply) override;
  grpc::ServerUnaryReactor* IncrementCount(grpc::CallbackServerContext* ctx,
                                           const v1::ChangeCountRequest* request,
                                           v1::AckReply* reply) override;
  grpc::ServerUnaryReactor* DecrementCount(grpc::CallbackServerContext* ctx,
                                           const v1::ChangeCountRequest* request,
                                           v1::AckReply* reply) override;
  grpc::ServerUnaryReactor* PutObj(grpc::CallbackServerContext* ctx,
                                   const v1::PutObjRequest* request,
                                   v1::PutObjReply* reply) override;
  grpc::ServerUnaryReactor* RequestObj(grpc::CallbackServerContext* ctx,
                                       const v1::RequestObjRequest* request,
                                       v1::AckReply* reply) override;
  grpc::ServerUnaryReactor* AliasObjectIDs(grpc::CallbackServerContext* ctx,
                                           const v1::AliasObjectIDsRequest* request,
                                           v1::AckReply* reply) override;
  grpc::ServerUnaryReactor* ObjReady(grpc::CallbackServerContext* ctx,
                                     const v1::ObjReadyRequest* request,
                                     v1::AckReply* reply) override;
  grpc::ServerUnaryReactor* IncrementRefCount(grpc::CallbackServerContext* ctx,
                                              const v1::IncrementRefCountRequest* request,
                                              v1::AckReply* reply) override;
  grpc::ServerUnaryReactor* DecrementRefCount(grpc::CallbackServerContext* ctx,
                                              const v1::DecrementRefCountRequest* request,
                                              v1::AckReply* reply) override;
  grpc::ServerUnaryReactor* AddContainedObjectIDs(grpc::CallbackServerContext* ctx,
                                                  const v1::AddContainedObjectIDsRequest* request,
                                                  v1::AckReply* reply) override;
  grpc::ServerUnaryReactor* ReadyForNewTask(grpc::CallbackServerContext* ctx,
                                            const v1::ReadyForNewTaskRequest* request,
                                            v1::AckReply* reply) override;
  grpc::ServerUnaryReactor* SchedulerInfo(grpc::CallbackServerContext* ctx,
                                          const v1::SchedulerInfoRequest* request,
                                          v1::SchedulerInfoReply* reply) override;
  grpc::ServerUnaryReactor* TaskInfo(grpc::CallbackServerContext* ctx,
                                     const v1::TaskInfoRequest* request,
                                     v1::TaskInfoReply* reply) override;
  grpc::ServerUnaryReactor* KillWorkers(grpc::CallbackServerContext* ctx,
                                        const v1::KillWorkersRequest* request,
                                        v1::KillWorkersReply* reply) override;
  grpc::ServerUnaryReactor* ExportFunction(grpc::CallbackServerContext* ctx,
                                           const v1::ExportFunctionRequest* request,
                                           v1::ExportFunctionReply* reply) override;
  grpc::ServerUnaryReactor* ExportReusableVariable(grpc::CallbackServerContext* ctx,
                                                   const v1::ExportReusableVariableRequest* request,
                                                   v1::AckReply* reply) override;

 private:
  grpc::ServerUnaryReactor* Refused(grpc::CallbackServerContext* ctx) const;
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx,
                                   const absl::Status& status) const;

  TaskScheduler* const scheduler_;
  const CallAuth* const auth_;
  DurabilityGate* const gate_;
};

}  // namespace cohort::runtime
