#include "runtime/client/task_client.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_auth.h"
#include "runtime/rpc/task_messages.h"

namespace cohort::runtime {

namespace {

constexpr uint64_t kChunkBytes = uint64_t{1} << 20;

grpc::ChannelArguments Unlimited() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return args;
}

absl::Status Named(const grpc::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(FromGrpc(s).code(), absl::StrCat(what, ": ", s.error_message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TaskClient>> TaskClient::Connect(const TaskClientOptions& options) {
  std::unique_ptr<TaskClient> client(new TaskClient());
  client->scheduler_ = ::Scheduler::NewStub(CreateChannelWithToken(
      options.scheduler, grpc::InsecureChannelCredentials(), Unlimited(), options.auth_token));
  client->local_ = v1::LocalStore::NewStub(CreateChannelWithToken(
      options.objstore, grpc::InsecureChannelCredentials(), Unlimited(), options.auth_token));
  v1::RegisterWorkerRequest request;
  request.set_node_ip_address(options.node_ip);
  request.set_objstore_address(options.objstore);
  request.set_is_driver(options.is_driver);
  request.set_worker_address(options.worker_address);
  v1::RegisterWorkerReply reply;
  auto ctx = client->Context(absl::Seconds(30));
  ctx->set_wait_for_ready(true);
  grpc::Status s = client->scheduler_->RegisterWorker(ctx.get(), request, &reply);
  if (!s.ok()) {
    return Named(s, absl::StrCat("registering with the scheduler at ", options.scheduler));
  }
  client->id_ = reply.workerid();
  client->reconnect_ = options.reconnect;
  client->store_ = reply.objstoreid();
  client->address_ = reply.worker_address();
  return client;
}

std::unique_ptr<grpc::ClientContext> TaskClient::Context(absl::Duration timeout) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return ctx;
}

template <typename Request, typename Reply>
grpc::Status TaskClient::CallScheduler(
    grpc::Status (::Scheduler::Stub::*method)(grpc::ClientContext*, const Request&, Reply*),
    const Request& request, Reply* reply, bool numbered) {
  const std::string number = numbered ? absl::StrCat(id_, "/", ++next_call_) : "";
  const absl::Time give_up = absl::Now() + reconnect_;
  absl::Duration pause = absl::Milliseconds(100);
  while (true) {
    auto ctx = Context(absl::Seconds(30));
    ctx->set_wait_for_ready(true);
    if (numbered) ctx->AddMetadata(kCallMetadata, number);
    grpc::Status s = (scheduler_.get()->*method)(ctx.get(), request, reply);
    // Unreachable, or cut off: the coordinator is (re)starting. The same call, with the same
    // number, goes to the next one.
    bool again = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                 s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (!again || absl::Now() + pause > give_up) return s;
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Seconds(1));
  }
}

absl::StatusOr<std::vector<ObjectId>> TaskClient::Submit(const std::string& function,
                                                         const std::vector<v1::Value>& args,
                                                         absl::Duration wait) {
  v1::SubmitTaskRequest request;
  request.set_workerid(id_);
  request.mutable_task()->set_name(function);
  for (const v1::Value& arg : args) *request.mutable_task()->add_arg() = arg;
  absl::Time give_up = absl::Now() + wait;
  absl::Duration pause = absl::Milliseconds(5);
  while (true) {
    v1::SubmitTaskReply reply;
    grpc::Status s = CallScheduler(&::Scheduler::Stub::SubmitTask, request, &reply, true);
    if (!s.ok()) return Named(s, absl::StrCat("submitting ", function));
    if (reply.function_registered()) {
      return std::vector<ObjectId>(reply.result().begin(), reply.result().end());
    }
    if (absl::Now() + pause > give_up) {
      return absl::NotFoundError(absl::StrCat("no worker registered function '", function,
                                              "' within ", absl::FormatDuration(wait)));
    }
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(200));
  }
}

absl::StatusOr<ObjectId> TaskClient::Put(const v1::Obj& value) {
  v1::PutObjRequest request;
  request.set_workerid(id_);
  v1::PutObjReply reply;
  grpc::Status s = CallScheduler(&::Scheduler::Stub::PutObj, request, &reply, true);
  if (!s.ok()) return Named(s, "PutObj");
  if (absl::Status stored = Store(reply.objectid(), value); !stored.ok()) return stored;
  return reply.objectid();
}

absl::Status TaskClient::Store(ObjectId id, const v1::Obj& value) {
  std::string data = value.SerializeAsString();
  v1::AckReply reply;
  auto ctx = Context(absl::Minutes(10));
  std::unique_ptr<grpc::ClientWriter<v1::PutChunk>> writer = local_->Put(ctx.get(), &reply);
  uint64_t offset = 0;
  do {
    v1::PutChunk chunk;
    if (offset == 0) {
      chunk.set_objectid(id);
      chunk.set_total_size(data.size());
    }
    uint64_t n = std::min<uint64_t>(kChunkBytes, data.size() - offset);
    chunk.set_data(data.substr(offset, n));
    offset += n;
    if (!writer->Write(chunk)) break;
  } while (offset < data.size());
  writer->WritesDone();
  return Named(writer->Finish(), absl::StrCat("storing object ", id));
}

absl::StatusOr<v1::Obj> TaskClient::Get(ObjectId id, absl::Duration timeout) {
  v1::RequestObjRequest ask;
  ask.set_workerid(id_);
  ask.set_objectid(id);
  v1::AckReply ack;
  grpc::Status s = CallScheduler(&::Scheduler::Stub::RequestObj, ask, &ack, false);
  if (!s.ok()) return Named(s, absl::StrCat("RequestObj ", id));
  v1::GetRequest request;
  request.set_objectid(id);
  auto ctx = Context(timeout);
  std::unique_ptr<grpc::ClientReader<v1::ObjChunk>> reader = local_->Get(ctx.get(), request);
  v1::ObjChunk chunk;
  std::string data;
  while (reader->Read(&chunk)) {
    if (data.empty()) data.reserve(chunk.total_size());
    data += chunk.data();
  }
  s = reader->Finish();
  if (!s.ok()) return Named(s, absl::StrCat("getting object ", id));
  v1::Obj value;
  if (!value.ParseFromString(data)) {
    return absl::DataLossError(absl::StrCat("object ", id, " is not a serialized Obj"));
  }
  if (value.has_error_data()) return absl::AbortedError(value.error_data().message());
  return value;
}

absl::Status TaskClient::Release(const std::vector<ObjectId>& ids) {
  v1::DecrementRefCountRequest request;
  for (ObjectId id : ids) request.add_objectid(id);
  v1::AckReply reply;
  return Named(CallScheduler(&::Scheduler::Stub::DecrementRefCount, request, &reply, true),
               "DecrementRefCount");
}

absl::Status TaskClient::Retain(const std::vector<ObjectId>& ids) {
  v1::IncrementRefCountRequest request;
  for (ObjectId id : ids) request.add_objectid(id);
  v1::AckReply reply;
  return Named(CallScheduler(&::Scheduler::Stub::IncrementRefCount, request, &reply, true),
               "IncrementRefCount");
}

absl::Status TaskClient::Alias(ObjectId alias, ObjectId target) {
  v1::AliasObjectIDsRequest request;
  request.set_alias_objectid(alias);
  request.set_target_objectid(target);
  v1::AckReply reply;
  return Named(CallScheduler(&::Scheduler::Stub::AliasObjectIDs, request, &reply, false),
               "AliasObjectIDs");
}

absl::Status TaskClient::RegisterFunction(const std::string& name, uint64_t num_return_vals) {
  v1::RegisterFunctionRequest request;
  request.set_workerid(id_);
  request.set_fnname(name);
  request.set_num_return_vals(num_return_vals);
  v1::AckReply reply;
  return Named(CallScheduler(&::Scheduler::Stub::RegisterFunction, request, &reply, false),
               absl::StrCat("registering ", name));
}

absl::Status TaskClient::ReadyForNewTask(std::optional<std::pair<bool, std::string>> previous,
                                         OperationId operation, bool leaving) {
  v1::ReadyForNewTaskRequest request;
  request.set_workerid(id_);
  request.set_leaving(leaving);
  if (previous.has_value()) {
    request.mutable_previous_task_info()->set_task_succeeded(previous->first);
    request.mutable_previous_task_info()->set_error_message(previous->second);
    request.mutable_previous_task_info()->set_operation(operation);
  }
  v1::AckReply reply;
  if (leaving && !previous.has_value()) {
    // Only a courtesy (the scheduler loses a silent worker anyway): one short try, so that a
    // worker whose coordinator is gone too is not held up.
    return Named(scheduler_->ReadyForNewTask(Context(absl::Seconds(2)).get(), request, &reply),
                 "ReadyForNewTask");
  }
  return Named(CallScheduler(&::Scheduler::Stub::ReadyForNewTask, request, &reply, false),
               "ReadyForNewTask");
}

absl::StatusOr<v1::TaskInfoReply> TaskClient::TaskInfo() {
  v1::TaskInfoReply reply;
  grpc::Status s =
      CallScheduler(&::Scheduler::Stub::TaskInfo, v1::TaskInfoRequest(), &reply, false);
  if (!s.ok()) return Named(s, "TaskInfo");
  return reply;
}

absl::StatusOr<v1::SchedulerInfoReply> TaskClient::SchedulerInfo() {
  v1::SchedulerInfoReply reply;
  grpc::Status s =
      CallScheduler(&::Scheduler::Stub::SchedulerInfo, v1::SchedulerInfoRequest(), &reply, false);
  if (!s.ok()) return Named(s, "SchedulerInfo");
  return reply;
}

absl::StatusOr<bool> TaskClient::KillWorkers() {
  v1::KillWorkersReply reply;
  grpc::Status s =
      CallScheduler(&::Scheduler::Stub::KillWorkers, v1::KillWorkersRequest(), &reply, false);
  if (!s.ok()) return Named(s, "KillWorkers");
  return reply.success();
}

}  // namespace cohort::runtime
