#include "runtime/rpc/scheduler_service.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/rpc/task_messages.h"

namespace cohort::runtime {

namespace {

// The call's number, from its `cohort-call: WORKER/NUMBER` metadata (none: a call with no
// number, taken as new every time).
absl::StatusOr<CallId> CallIdOf(const grpc::CallbackServerContext& ctx) {
  const auto& metadata = ctx.client_metadata();
  auto it = metadata.find(kCallMetadata);
  if (it == metadata.end()) return CallId{};
  absl::string_view value(it->second.data(), it->second.size());
  std::pair<absl::string_view, absl::string_view> parts = absl::StrSplit(value, '/');
  CallId call;
  if (!absl::SimpleAtoi(parts.first, &call.worker) ||
      !absl::SimpleAtoi(parts.second, &call.number) || call.number == 0) {
    return absl::InvalidArgumentError(absl::StrCat("metadata ", kCallMetadata, " is '", value,
                                                   "'; it must be WORKER/NUMBER, NUMBER > 0"));
  }
  return call;
}

}  // namespace

grpc::ServerUnaryReactor* SchedulerService::Answer(grpc::CallbackServerContext* ctx,
                                                   const absl::Status& status) const {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (gate_ == nullptr) {
    reactor->Finish(ToGrpc(status));
  } else {
    gate_->AfterDurable([reactor, wire = ToGrpc(status)] { reactor->Finish(wire); });
  }
  return reactor;
}

// Answers UNAUTHENTICATED for a call without the credential; null when the call may go on.
grpc::ServerUnaryReactor* SchedulerService::Refused(grpc::CallbackServerContext* ctx) const {
  if (auth_ == nullptr) return nullptr;
  absl::Status s = auth_->Check(*ctx);
  return s.ok() ? nullptr : Answer(ctx, s);
}

grpc::ServerUnaryReactor* SchedulerService::RegisterWorker(grpc::CallbackServerContext* ctx,
                                                           const v1::RegisterWorkerRequest* request,
                                                           v1::RegisterWorkerReply* reply) {
  if (auto* refused = Refused(ctx)) return refused;
  absl::StatusOr<WorkerRegistration> r =
      scheduler_->RegisterWorker(request->node_ip_address(), request->objstore_address(),
                                 request->is_driver(), request->worker_address());
  if (r.ok()) {
    reply->set_workerid(r->worker);
    reply->set_objstoreid(r->store);
    reply->set_worker_address(r->worker_address);
    reply->set_objstore_address(r->store_address);
  }
  return Answer(ctx, r.status());
}

grpc::ServerUnaryReactor* SchedulerService::RegisterObjStore(
    grpc::CallbackServerContext* ctx, const v1::RegisterObjStoreRequest* request,
    v1::RegisterObjStoreReply* reply) {
  if (auto* refused = Refused(ctx)) return refused;
  absl::StatusOr<StoreId> id = scheduler_->RegisterObjStore(request->objstore_address());
  if (id.ok()) reply->set_objstoreid(*id);
  return Answer(ctx, id.status());
}

grpc::ServerUnaryReactor* SchedulerService::RegisterFunction(
    grpc::CallbackServerContext* ctx, const v1::RegisterFunctionRequest* request,
    v1::AckReply* /*reply*/) {
  if (auto* refused = Refused(ctx)) return refused;
  return Answer(ctx, scheduler_->RegisterFunction(request->workerid(), request->fnname(),
                                                  request->num_return_vals()));
}

grpc::ServerUnaryReactor* SchedulerService::SubmitTask(grpc::CallbackServerContext* ctx,
                                                       const v1::SubmitTaskRequest* request,
                                                       v1::SubmitTaskReply* reply) {
  if (auto* refused = Refused(ctx)) return refused;
  absl::StatusOr<CallId> call = CallIdOf(*ctx);
  if (!call.ok()) return Answer(ctx, call.status());
  absl::StatusOr<SubmitResult> r =
      scheduler_->SubmitTask(request->workerid(), ToTaskSpec(request->task()), *call);
  if (r.ok()) {
    reply->set_function_registered(r->function_registered);
    for (ObjectId id : r->results) reply->add_result(id);
  }
  return Answer(ctx, r.status());
}

grpc::ServerUnaryReactor* SchedulerService::IncrementCount(
    grpc::CallbackServerContext* ctx, const v1::ChangeCountRequest* /*request*/,
    v1::AckReply* /*reply*/) {
  if (auto* refused = Refused(ctx)) return refused;
  return Answer(ctx, absl::UnimplementedError(
                         "IncrementCount has no meaning (the original never implemented it); "
                         "use IncrementRefCount"));
}

grpc::ServerUnaryReactor* SchedulerService::DecrementCount(
    grpc::CallbackServerContext* ctx, const v1::ChangeCountRequest* /*request*/,
    v1::AckReply* /*reply*/) {
  if (auto* refused = Refused(ctx)) return refused;
  return Answer(ctx, absl::UnimplementedError(
                         "DecrementCount has no meaning (the original never implemented it); "
                         "use DecrementRefCount"));
}

grpc::ServerUnaryReactor* SchedulerService::PutObj(grpc::CallbackServerContext* ctx,
                                                   const v1::PutObjRequest* request,
                                                   v1::PutObjReply* reply) {
  if (auto* refused = Refused(ctx)) return refused;
  absl::StatusOr<CallId> call = CallIdOf(*ctx);
  if (!call.ok()) return Answer(ctx, call.status());
  absl::StatusOr<ObjectId> id = scheduler_->PutObj(request->workerid(), *call);
  if (id.ok()) reply->set_objectid(*id);
  return Answer(ctx, id.status());
}

grpc::ServerUnaryReactor* SchedulerService::RequestObj(grpc::CallbackServerContext* ctx,
                                                       const v1::RequestObjRequest* request,
                                                       v1::AckReply* /*reply*/) {
  if (auto* refused = Refused(ctx)) return refused;
  return Answer(ctx, scheduler_->RequestObj(request->workerid(), request->objectid()));
}

grpc::ServerUnaryReactor* SchedulerService::AliasObjectIDs(grpc::CallbackServerContext* ctx,
                                                           const v1::AliasObjectIDsRequest* request,
                                                           v1::AckReply* /*reply*/) {
  if (auto* refused = Refused(ctx)) return refused;
  return Answer(ctx,
                scheduler_->AliasObjectIDs(request->alias_objectid(), request->target_objectid()));
}

grpc::ServerUnaryReactor* SchedulerService::ObjReady(grpc::CallbackServerContext* ctx,
                                                     const v1::ObjReadyRequest* request,
                                                     v1::AckReply* /*reply*/) {
  if (auto* refused = Refused(ctx)) return refused;
  return Answer(ctx,
                scheduler_->ObjReady(request->objectid(), request->objstoreid(), request->size()));
}

grpc::ServerUnaryReactor* SchedulerService::IncrementRefCount(
    grpc::CallbackServerContext* ctx, const v1::IncrementRefCountRequest* request,
    v1::AckReply* /*reply*/) {
  if (auto* refused = Refused(ctx)) return refused;
  absl::StatusOr<CallId> call = CallIdOf(*ctx);
  if (!call.ok()) return Answer(ctx, call.status());
  std::vector<ObjectId> ids(request->objectid().begin(), request->objectid().end());
  return Answer(ctx, scheduler_->IncrementRefCount(ids, *call));
}

grpc::ServerUnaryReactor* SchedulerService::DecrementRefCount(
    grpc::CallbackServerContext* ctx, const v1::DecrementRefCountRequest* request,
    v1::AckReply* /*reply*/) {
  if (auto* refused = Refused(ctx)) return refused;
  absl::StatusOr<CallId> call = CallIdOf(*ctx);
  if (!call.ok()) return Answer(ctx, call.status());
  std::vector<ObjectId> ids(request->objectid().begin(), request->objectid().end());
  return Answer(ctx, scheduler_->DecrementRefCount(ids, *call));
}

grpc::ServerUnaryReactor* SchedulerService::AddContainedObjectIDs(
    grpc::CallbackServerContext* ctx, const v1::AddContainedObjectIDsRequest* request,
    v1::AckReply* /*reply*/) {
  if (auto* refused = Refused(ctx)) return refused;
  std::vector<ObjectId> ids(request->contained_objectid().begin(),
                            request->contained_objectid().end());
  absl::StatusOr<CallId> call = CallIdOf(*ctx);
  if (!call.ok()) return Answer(ctx, call.status());
  return Answer(ctx, scheduler_->AddContainedObjectIDs(request->objectid(), ids, *call));
}

grpc::ServerUnaryReactor* SchedulerService::ReadyForNewTask(
    grpc::CallbackServerContext* ctx, const v1::ReadyForNewTaskRequest* request,
    v1::AckReply* /*reply*/) {
  if (auto* refused = Refused(ctx)) return refused;
  std::optional<FinishedTask> previous;
  if (request->has_previous_task_info()) {
    previous = FinishedTask{request->previous_task_info().task_succeeded(),
                            request->previous_task_info().error_message(),
                            request->previous_task_info().operation()};
  }
  return Answer(ctx,
                scheduler_->ReadyForNewTask(request->workerid(), previous, request->leaving()));
}

grpc::ServerUnaryReactor* SchedulerService::SchedulerInfo(
    grpc::CallbackServerContext* ctx, const v1::SchedulerInfoRequest* /*request*/,
    v1::SchedulerInfoReply* reply) {
  if (auto* refused = Refused(ctx)) return refused;
  FillSchedulerInfo(scheduler_->SchedulerInfo(), reply);
  return Answer(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* SchedulerService::TaskInfo(grpc::CallbackServerContext* ctx,
                                                     const v1::TaskInfoRequest* /*request*/,
                                                     v1::TaskInfoReply* reply) {
  if (auto* refused = Refused(ctx)) return refused;
  FillTaskInfo(scheduler_->TaskInfo(), reply);
  return Answer(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* SchedulerService::KillWorkers(grpc::CallbackServerContext* ctx,
                                                        const v1::KillWorkersRequest* /*request*/,
                                                        v1::KillWorkersReply* reply) {
  if (auto* refused = Refused(ctx)) return refused;
  reply->set_success(scheduler_->KillWorkers());
  return Answer(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* SchedulerService::ExportFunction(grpc::CallbackServerContext* ctx,
                                                           const v1::ExportFunctionRequest* request,
                                                           v1::ExportFunctionReply* /*reply*/) {
  if (auto* refused = Refused(ctx)) return refused;
  return Answer(ctx, scheduler_->ExportFunction(request->function().implementation()));
}

grpc::ServerUnaryReactor* SchedulerService::ExportReusableVariable(
    grpc::CallbackServerContext* ctx, const v1::ExportReusableVariableRequest* request,
    v1::AckReply* /*reply*/) {
  if (auto* refused = Refused(ctx)) return refused;
  if (request->reusable_variable().name().empty()) {
    return Answer(ctx, absl::InvalidArgumentError("a reusable variable needs a name"));
  }
  return Answer(
      ctx, scheduler_->ExportReusableVariable(request->reusable_variable().SerializeAsString()));
}

}  // namespace cohort::runtime
