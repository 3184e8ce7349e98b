#include "runtime/worker/cpp_worker.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_auth.h"
#include "runtime/rpc/task_messages.h"
#include "runtime/worker/builtin_functions.h"
#include "spdlog/spdlog.h"

namespace cohort::runtime {

CppWorker::CppWorker(CppWorkerOptions options) : options_(std::move(options)) {}

CppWorker::~CppWorker() {
  Stop();
  if (runner_.joinable()) runner_.join();
  if (server_) server_->Wait();
}

grpc::Status CppWorker::Refused(const grpc::ServerContext& ctx) const {
  if (options_.auth_token.empty()) return grpc::Status::OK;
  return ToGrpc(CallAuth(options_.auth_token).Check(ctx));
}

absl::Status CppWorker::Start() {
  std::string listen = absl::StrCat(options_.listen_host, ":0");
  if (options_.auth_token.empty() && !options_.insecure_no_auth &&
      !IsLoopbackListenAddress(listen)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--listen-host ", options_.listen_host,
        " reaches beyond this machine and no --auth-token-file is given: anyone who reaches "
        "the port could send this worker tasks. Give the job's token, listen on loopback "
        "(127.0.0.1), or pass --insecure-no-auth to serve everyone"));
  }
  grpc::ServerBuilder builder;
  int port = 0;
  // With the token, a call without it is refused before its message is read.
  builder.AddListeningPort(listen, PlainServerCredentials(options_.auth_token), &port);
  builder.RegisterService(this);
  builder.SetMaxReceiveMessageSize(options_.max_message_bytes);
  // As the coordinator's (coordinator_server.cc): no window grown ahead of a read.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve WorkerService on ", listen));
  }
  TaskClientOptions client;
  client.scheduler = options_.scheduler;
  client.objstore = options_.objstore;
  client.node_ip = options_.listen_host;
  client.is_driver = false;
  client.worker_address = absl::StrCat(options_.listen_host, ":", port);
  client.auth_token = options_.auth_token;
  absl::StatusOr<std::unique_ptr<TaskClient>> connected = TaskClient::Connect(client);
  if (!connected.ok()) return connected.status();
  client_ = *std::move(connected);
  for (const BuiltinFunction& f : BuiltinFunctions()) {
    if (absl::Status s = client_->RegisterFunction(f.name, 1); !s.ok()) return s;
  }
  if (absl::Status s = client_->ReadyForNewTask(std::nullopt); !s.ok()) return s;
  spdlog::info("worker {} serving on {} with store {}", client_->id(), client.worker_address,
               options_.objstore);
  runner_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void CppWorker::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
}

void CppWorker::Leave() {
  absl::MutexLock lock(&mu_);
  leaving_ = true;
}

absl::Status CppWorker::Wait() {
  if (runner_.joinable()) runner_.join();
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
  }
  absl::MutexLock lock(&mu_);
  return ended_;
}

grpc::Status CppWorker::ExecuteTask(grpc::ServerContext* ctx, const v1::ExecuteTaskRequest* request,
                                    v1::ExecuteTaskReply* /*reply*/) {
  if (grpc::Status s = Refused(*ctx); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (stopping_ || leaving_) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the worker is stopping");
  }
  OperationId operation = request->operation();
  if (operation != 0) {
    if (held_.contains(operation) ||
        std::find(reported_.begin(), reported_.end(), operation) != reported_.end()) {
      return grpc::Status::OK;  // sent again by a restarted coordinator
    }
    held_.insert(operation);
  }
  tasks_.push_back(*request);
  spdlog::debug("worker {}: took task {} (operation {})", id(), request->task().name(), operation);
  return grpc::Status::OK;
}

grpc::Status CppWorker::ImportFunction(grpc::ServerContext* ctx,
                                       const v1::ImportFunctionRequest* request,
                                       v1::ImportFunctionReply* /*reply*/) {
  if (grpc::Status s = Refused(*ctx); !s.ok()) return s;
  const std::string& name = request->function().implementation();
  if (FindBuiltin(name) != nullptr) return ToGrpc(client_->RegisterFunction(name, 1));
  return grpc::Status::OK;
}

grpc::Status CppWorker::ImportReusableVariable(grpc::ServerContext* ctx,
                                               const v1::ImportReusableVariableRequest* /*request*/,
                                               v1::AckReply* /*reply*/) {
  return Refused(*ctx);
}

grpc::Status CppWorker::Die(grpc::ServerContext* ctx, const v1::DieRequest* /*request*/,
                            v1::DieReply* /*reply*/) {
  if (grpc::Status s = Refused(*ctx); !s.ok()) return s;
  spdlog::info("worker {} told to die by the scheduler", id());
  Stop();
  return grpc::Status::OK;
}

grpc::Status CppWorker::Alive(grpc::ServerContext* ctx, const v1::AliveRequest* /*request*/,
                              v1::AckReply* /*reply*/) {
  return Refused(*ctx);
}

void CppWorker::Run() {
  while (true) {
    v1::ExecuteTaskRequest next;
    bool leave_idle = false;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || leaving_ || !tasks_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      leave_idle = tasks_.empty();  // woken by Leave with nothing to do
      if (!leave_idle) {
        next = std::move(tasks_.front());
        tasks_.pop_front();
      }
    }
    if (leave_idle) {
      absl::Status s = client_->ReadyForNewTask(std::nullopt, 0, /*leaving=*/true);
      if (!s.ok()) {
        spdlog::warn("worker {}: the scheduler did not hear that it leaves: {}", id(),
                     std::string(s.message()));
      }
      spdlog::info("worker {} left the pool", id());
      return;
    }
    const v1::Task& task = next.task();
    std::optional<std::string> error = Execute(task);
    if (error.has_value()) {
      spdlog::info("worker {}: task {} failed: {}", id(), task.name(), *error);
    }
    bool leaving = false;
    {
      absl::MutexLock lock(&mu_);
      leaving = leaving_;
    }
    absl::Status s =
        client_->ReadyForNewTask(std::make_pair(!error.has_value(), error.value_or(std::string())),
                                 next.operation(), leaving);
    {
      absl::MutexLock lock(&mu_);
      held_.erase(next.operation());
      reported_.push_back(next.operation());
      if (reported_.size() > kRememberedOperations) reported_.pop_front();
    }
    if (!s.ok()) {
      spdlog::error("worker {}: the scheduler did not take the task's end: {}", id(),
                    std::string(s.message()));
      absl::MutexLock lock(&mu_);
      ended_ = s;
      stopping_ = true;
      return;
    }
    if (leaving) {
      spdlog::info("worker {} left the pool after its task {}", id(), task.name());
      return;
    }
  }
}

std::optional<std::string> CppWorker::Execute(const v1::Task& task) {
  const BuiltinFunction* function = FindBuiltin(task.name());
  if (function == nullptr) return absl::StrCat("this worker has no function '", task.name(), "'");
  std::vector<v1::Obj> args;
  for (int i = 0; i < task.arg_size(); ++i) {
    const v1::Value& arg = task.arg(i);
    if (arg.id() == 0) {
      args.push_back(arg.obj());
      continue;
    }
    absl::StatusOr<v1::Obj> value = client_->Get(arg.id());
    if (!value.ok()) {
      return absl::StrCat("argument ", i, " (object ", arg.id(), "): ", value.status().message());
    }
    args.push_back(*std::move(value));
  }
  absl::StatusOr<v1::Obj> result = function->run(args);
  if (!result.ok()) return std::string(result.status().message());
  if (task.result_size() != 1) {
    return absl::StrCat(task.name(), " returns one value; the task has ", task.result_size(),
                        " results");
  }
  if (absl::Status s = client_->Store(task.result(0), *result); !s.ok()) {
    return std::string(s.message());
  }
  return std::nullopt;
}

}  // namespace cohort::runtime
