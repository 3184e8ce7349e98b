// cohortctl: inspect and drive a cohort coordinator from the command line.
#include "agent/cohortctl.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "agent/grpc_status.h"
#include "common/command_line.h"
#include "common/crash_report.h"
#include "common/grpc_auth.h"
#include "common/grpc_tls.h"
#include "grpcpp/grpcpp.h"
#include "tensorflow/coordination_service.grpc.pb.h"

namespace cohort::ctl {

absl::Status Client::Init() {
  if (!absl::ParseDuration(options_.timeout, &timeout_) || timeout_ <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dial-timeout \"", options_.timeout, "\" is not a duration such as 10s"));
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  std::string token;
  if (!options_.auth_token_file.empty()) {
    auto read = ReadAuthTokenFile(options_.auth_token_file, "--auth-token-file");
    if (!read.ok()) return read.status();
    token = *read;
  }
  auto credentials = ClientCredentials(options_.tls, &args);
  if (!credentials.ok()) return credentials.status();
  channel_ = CreateChannelWithToken(options_.coordinator, *credentials, args, token);
  // Fail fast and clearly rather than hang on an address nobody answers.
  if (!channel_->WaitForConnected(absl::ToChronoTime(absl::Now() + timeout_))) {
    std::string why = "is it running?";
    if (options_.tls.enabled()) {
      // Why a TLS handshake failed is only told to a call.
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
      tensorflow::GetTaskStateRequest request;
      tensorflow::GetTaskStateResponse response;
      grpc::Status probe = tensorflow::CoordinationService::NewStub(channel_)->GetTaskState(
          &context, request, &response);
      why = absl::StrCat("is it running, and does it take TLS with these certificates? ",
                         probe.error_message());
    }
    return absl::UnavailableError(absl::StrCat("cannot reach the coordinator at ",
                                               options_.coordinator, " within ", options_.timeout,
                                               " (", why, ")"));
  }
  tf_ = tensorflow::CoordinationService::NewStub(channel_);
  cohort_ = v1::Coordinator::NewStub(channel_);
  return absl::OkStatus();
}

int Fail(const absl::Status& status) {
  std::string message(status.message());
  std::replace(message.begin(), message.end(), '\n', ' ');
  std::fprintf(stderr, "cohortctl: %s\n", message.c_str());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      return kUsage;
    case absl::StatusCode::kUnavailable:
      return IsCoordinationServiceError(status) ? kRefused : kUnreachable;
    default:
      return kRefused;
  }
}

std::string OneLine(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += c;
    }
  }
  return out;
}

int Check(const grpc::Status& status) { return status.ok() ? 0 : Fail(FromGrpcStatus(status)); }

namespace {

// "JOB/N"
absl::StatusOr<tensorflow::CoordinatedTask> ParseTask(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, absl::MaxSplits('/', 1));
  int32_t id = -1;
  if (parts.size() != 2 || parts[0].empty() || !absl::SimpleAtoi(parts[1], &id) || id < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("task \"", text, "\" is not JOB/N (for example worker/0)"));
  }
  tensorflow::CoordinatedTask task;
  task.set_job_name(parts[0]);
  task.set_task_id(id);
  return task;
}

// The command line: its options, then the one command it names.
int Run(int argc, char** argv) {
  InstallCrashReport(argv[0]);
  CLI::App app{
      "cohortctl: inspect and drive a cohort coordinator.\n\n"
      "Examples:\n"
      "  cohortctl --coordinator localhost:8476 status\n"
      "  cohortctl kv put config/lr 0.01\n"
      "  cohortctl kv watch config\n"
      "  cohortctl barrier wait step-1 --task worker/0 --timeout 1m\n\n"
      "Values print raw on stdout; errors print one line on stderr. Exit status: 0 ok, 1 the\n"
      "coordinator refused (or the key is absent), 2 bad usage, 3 coordinator unreachable.",
      "cohortctl"};
  app.get_formatter()->column_width(36);
  app.require_subcommand(1);
  // Global options may also follow the subcommand: `cohortctl status -o json`.
  app.fallthrough();
  Options options;
  const char* env = std::getenv("COHORT_COORDINATOR_ADDRESS");
  options.coordinator = env && *env ? env : "localhost:8476";
  app.add_option("--coordinator", options.coordinator,
                 "coordinator gRPC address (default: $COHORT_COORDINATOR_ADDRESS or "
                 "localhost:8476)");
  const char* token_env = std::getenv("COHORT_AUTH_TOKEN_FILE");
  options.auth_token_file = token_env ? token_env : "";
  app.add_option("--auth-token-file", options.auth_token_file,
                 "file with the job's token, for a coordinator run with --auth-token-file "
                 "(default: $COHORT_AUTH_TOKEN_FILE)");
  AddClientTlsFlags(app, &options.tls);
  app.add_option("--dial-timeout", options.timeout,
                 "how long to wait for the coordinator, and for calls that answer at once")
      ->capture_default_str();
  app.add_option("-o,--output", options.output, "table or json")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();

  auto* status = app.add_subcommand("status", "tasks, open barriers and the key-value store");
  auto* tasks = app.add_subcommand(
      "tasks",
      "every task with its state and heartbeat age; then the task runtime's tasks, when it "
      "is in use (queued, running, succeeded, failed with their errors)");
  bool runtime_only = false;
  tasks->add_flag("--runtime", runtime_only,
                  "only the task runtime's tasks (its JSON with -o json)");
  auto* objects = app.add_subcommand(
      "objects", "the task runtime's objects still referenced: id, references, alias target");

  auto* kv = app.add_subcommand("kv", "the key-value store");
  kv->require_subcommand(1);
  std::string key, value, wait = "0s";
  bool overwrite = false, prefix = false;
  int64_t delta = 1, revision = 0;
  auto* get = kv->add_subcommand("get", "print a value (exit 1 when absent)");
  get->add_option("KEY", key)->required();
  get->add_option("--wait", wait, "block up to this long for the key to be set (e.g. 30s)")
      ->capture_default_str();
  auto* put = kv->add_subcommand("put", "store a value; fails if the key exists");
  put->add_option("KEY", key)->required();
  put->add_option("VALUE", value, "the value; - reads stdin (less one trailing newline)")
      ->required();
  put->add_flag("--overwrite", overwrite, "replace an existing value");
  auto* ls = kv->add_subcommand(
      "ls", "list keys and values under a directory (newlines in values shown as \\n)");
  ls->add_option("PREFIX", key)->required();
  auto* rm = kv->add_subcommand("rm", "remove a key");
  rm->add_option("KEY", key)->required();
  rm->add_flag("--prefix", prefix, "also remove every key under KEY/");
  auto* watch = kv->add_subcommand("watch", "print every change under a key until Ctrl-C");
  watch->add_option("PREFIX", key, "key or directory; \"\" watches everything")->required();
  watch->add_option("--rev", revision, "start at this revision (default: from now)");
  auto* incr = kv->add_subcommand("incr", "add N (default 1) to an integer value; print it");
  incr->add_option("KEY", key)->required();
  incr->add_option("N", delta)->capture_default_str();

  auto* barrier = app.add_subcommand("barrier", "barriers");
  barrier->require_subcommand(1);
  std::string barrier_id, task_text, barrier_timeout = "5m";
  std::vector<std::string> participants;
  int64_t counter = -1;
  auto* bwait = barrier->add_subcommand("wait", "arrive at a barrier as a task and wait");
  bwait->add_option("ID", barrier_id)->required();
  bwait->add_option("--task", task_text, "the arriving task, JOB/N")->required();
  bwait->add_option("--timeout", barrier_timeout, "barrier timeout")->capture_default_str();
  bwait->add_option("--participants", participants, "JOB/N ... (default: every workload task)");
  bwait->add_option("--counter", counter,
                    "instance counter (default: the open instance's, else 0)");
  auto* bcancel = barrier->add_subcommand("cancel", "cancel the open instance of a barrier");
  bcancel->add_option("ID", barrier_id)->required();
  bcancel->add_option("--task", task_text, "the cancelling task, JOB/N")->required();
  bcancel->add_option("--counter", counter, "instance counter (default: the open instance's)");

  auto* report = app.add_subcommand("report-error", "report an error as a task; it reaches all");
  std::string message;
  report->add_option("--task", task_text, "the reporting task, JOB/N")->required();
  report->add_option("MESSAGE", message)->required();

  AddVersionFlag(app);
  if (auto exit_code = ParseCommandLine(app, argc, argv)) return *exit_code;

  Client client(options);
  if (auto s = client.Init(); !s.ok()) return Fail(s);

  if (status->parsed()) return ShowStatus(client);
  if (tasks->parsed()) return ShowTasks(client, runtime_only);
  if (objects->parsed()) return ShowObjects(client);

  if (get->parsed()) return KvGet(client, key, wait);
  if (put->parsed()) return KvPut(client, key, value, overwrite);
  if (ls->parsed()) return KvList(client, key);
  if (rm->parsed()) return KvRemove(client, key, prefix);
  if (watch->parsed()) return KvWatch(client, key, revision);
  if (incr->parsed()) return KvIncrement(client, key, delta);

  auto task = ParseTask(task_text);
  if (!task.ok()) return Fail(task.status());
  if ((bwait->parsed() || bcancel->parsed()) && counter < 0) {
    // The open instance's counter, so that a human need not know it.
    auto snapshot = Snapshot(client);
    if (!snapshot.ok()) return Fail(snapshot.status());
    counter = 0;
    for (const auto& b : snapshot->barriers()) {
      if (b.id() == barrier_id) counter = b.counter();
    }
  }
  if (bwait->parsed()) {
    absl::Duration timeout;
    if (!absl::ParseDuration(barrier_timeout, &timeout) || timeout <= absl::ZeroDuration()) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--timeout \"", barrier_timeout, "\" is not a positive duration")));
    }
    tensorflow::BarrierRequest request;
    request.set_barrier_id(barrier_id);
    request.set_barrier_timeout_in_ms(absl::ToInt64Milliseconds(timeout));
    *request.mutable_source_task() = *task;
    request.set_counter(counter);
    for (const std::string& p : participants) {
      auto t = ParseTask(p);
      if (!t.ok()) return Fail(t.status());
      *request.add_tasks() = *t;
    }
    tensorflow::BarrierResponse response;
    auto s =
        client.tf().Barrier(client.Context(timeout + absl::Seconds(10)).get(), request, &response);
    if (!s.ok()) return Check(s);
    std::printf("barrier %s passed (counter %lld)\n", barrier_id.c_str(),
                static_cast<long long>(response.counter()));
    return 0;
  }
  if (bcancel->parsed()) {
    tensorflow::CancelBarrierRequest request;
    request.set_barrier_id(barrier_id);
    *request.mutable_source_task() = *task;
    request.set_counter(counter);
    tensorflow::CancelBarrierResponse response;
    return Check(client.tf().CancelBarrier(client.Context().get(), request, &response));
  }
  if (report->parsed()) {
    // Reported about the task, not by it: the task need not be registered.
    tensorflow::ReportErrorToTaskRequest request;
    request.set_error_code(static_cast<int>(absl::StatusCode::kInternal));
    request.set_error_message(message);
    *request.mutable_error_payload()->mutable_source_task() = *task;
    tensorflow::ReportErrorToTaskResponse response;
    return Check(client.tf().ReportErrorToTask(client.Context().get(), request, &response));
  }
  return kUsage;
}

}  // namespace
}  // namespace cohort::ctl

int main(int argc, char** argv) { return cohort::ctl::Run(argc, argv); }
