// cohortctl: inspect and drive a cohort coordinator from the command line.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "agent/grpc_status.h"
#include "agent/key_watcher.h"
#include "agent/runtime_views.h"
#include "cohort/runtime/v1/services.grpc.pb.h"
#include "cohort/v1/coordinator.grpc.pb.h"
#include "common/crash_report.h"
#include "common/grpc_auth.h"
#include "common/grpc_tls.h"
#include "common/yaml_config.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "tensorflow/coordination_service.grpc.pb.h"

namespace {

using Json = nlohmann::json;

struct Options {
  std::string coordinator;
  std::string auth_token_file;
  std::string timeout = "10s";
  std::string output = "table";
  cohort::ClientTls tls;
};

// Exit codes: 1 the coordinator said no (or the value is absent), 2 bad usage,
// 3 the coordinator could not be reached.
constexpr int kRefused = 1;
constexpr int kUsage = 2;
constexpr int kUnreachable = 3;

class Client {
 public:
  explicit Client(const Options& options) : options_(options) {}

  absl::Status Init() {
    if (!absl::ParseDuration(options_.timeout, &timeout_) || timeout_ <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--dial-timeout \"", options_.timeout, "\" is not a duration such as 10s"));
    }
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    std::string token;
    if (!options_.auth_token_file.empty()) {
      auto read = cohort::ReadAuthTokenFile(options_.auth_token_file, "--auth-token-file");
      if (!read.ok()) return read.status();
      token = *read;
    }
    auto credentials = cohort::ClientCredentials(options_.tls, &args);
    if (!credentials.ok()) return credentials.status();
    channel_ = cohort::CreateChannelWithToken(options_.coordinator, *credentials, args, token);
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
    cohort_ = cohort::v1::Coordinator::NewStub(channel_);
    return absl::OkStatus();
  }

  std::unique_ptr<grpc::ClientContext> Context(
      absl::Duration timeout = absl::ZeroDuration()) const {
    auto context = std::make_unique<grpc::ClientContext>();
    absl::Duration d = timeout == absl::ZeroDuration() ? timeout_ : timeout;
    if (d != absl::InfiniteDuration()) context->set_deadline(absl::ToChronoTime(absl::Now() + d));
    return context;
  }

  tensorflow::CoordinationService::Stub& tf() { return *tf_; }
  cohort::v1::Coordinator::Stub& cohort() { return *cohort_; }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }
  bool json() const { return options_.output == "json"; }

 private:
  const Options& options_;
  absl::Duration timeout_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<tensorflow::CoordinationService::Stub> tf_;
  std::unique_ptr<cohort::v1::Coordinator::Stub> cohort_;
};

int Fail(const absl::Status& status) {
  std::string message(status.message());
  std::replace(message.begin(), message.end(), '\n', ' ');
  std::fprintf(stderr, "cohortctl: %s\n", message.c_str());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      return kUsage;
    case absl::StatusCode::kUnavailable:
      return cohort::IsCoordinationServiceError(status) ? kRefused : kUnreachable;
    default:
      return kRefused;
  }
}

// A value as one line of a table: newlines and tabs shown as \n and \t, so that one value is
// one line (the JSON output has it as it is).
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

// At most `width` characters of `text`, on one line, with "..." when cut.
std::string Clip(const std::string& text, size_t width) {
  std::string line = OneLine(text);
  if (line.size() <= width) return line;
  return line.substr(0, width - 3) + "...";
}

int Check(const grpc::Status& status) {
  return status.ok() ? 0 : Fail(cohort::FromGrpcStatus(status));
}

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

const char* StateName(cohort::v1::TaskState state) {
  switch (state) {
    case cohort::v1::UNINITIALIZED:
      return "UNINITIALIZED";
    case cohort::v1::DISCONNECTED:
      return "DISCONNECTED";
    case cohort::v1::CONNECTED:
      return "CONNECTED";
    case cohort::v1::ERROR:
      return "ERROR";
    default:
      return "UNKNOWN";
  }
}

Json TaskJson(const cohort::v1::TaskSnapshot& task) {
  Json out = {{"job", task.job()},
              {"task", task.task_id()},
              {"state", StateName(task.state())},
              {"incarnation", absl::StrCat(absl::Hex(task.incarnation()))},
              {"auxiliary", task.auxiliary()}};
  out["seconds_since_heartbeat"] =
      task.seconds_since_heartbeat() < 0 ? Json() : Json(task.seconds_since_heartbeat());
  if (task.error_code() != 0) {
    out["error"] = {
        {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(task.error_code()))},
        {"message", task.error_message()}};
  }
  return out;
}

Json SnapshotJson(const cohort::v1::ClusterSnapshot& snapshot) {
  Json tasks = Json::array(), barriers = Json::array();
  for (const auto& task : snapshot.tasks()) tasks.push_back(TaskJson(task));
  for (const auto& b : snapshot.barriers()) {
    barriers.push_back(
        {{"id", b.id()},
         {"counter", b.counter()},
         {"open_seconds", b.open_seconds()},
         {"seconds_to_deadline", b.seconds_to_deadline()},
         {"arrived", std::vector<std::string>(b.arrived().begin(), b.arrived().end())},
         {"missing", std::vector<std::string>(b.missing().begin(), b.missing().end())}});
  }
  return {{"service_incarnation", absl::StrCat(absl::Hex(snapshot.service_incarnation()))},
          {"default_job", snapshot.default_job()},
          {"cluster_registered", snapshot.cluster_registered()},
          {"job_error", snapshot.job_error().empty() ? Json() : Json(snapshot.job_error())},
          {"tasks", tasks},
          {"barriers", barriers},
          {"key_value",
           {{"keys", snapshot.key_count()},
            {"bytes", snapshot.key_bytes()},
            {"revision", snapshot.key_revision()}}}};
}

void PrintTasks(const cohort::v1::ClusterSnapshot& snapshot) {
  std::printf("%-24s %-14s %-18s %-10s %s\n", "TASK", "STATE", "INCARNATION", "HEARTBEAT", "ERROR");
  for (const auto& task : snapshot.tasks()) {
    std::string name = absl::StrCat(task.job(), "/", task.task_id(), task.auxiliary() ? "*" : "");
    std::string heartbeat = task.seconds_since_heartbeat() < 0
                                ? "-"
                                : absl::StrFormat("%.1fs", task.seconds_since_heartbeat());
    std::string incarnation =
        task.incarnation() == 0 ? "-" : absl::StrCat(absl::Hex(task.incarnation()));
    // A task that never registered and one that registered and left (shut down, reset) are
    // both DISCONNECTED to the coordinator; the table tells them apart.
    const bool never = task.state() == cohort::v1::DISCONNECTED && task.incarnation() == 0 &&
                       task.seconds_since_heartbeat() < 0;
    std::printf("%-24s %-14s %-18s %-10s %s\n", name.c_str(),
                never ? "NOT-REGISTERED" : StateName(task.state()), incarnation.c_str(),
                heartbeat.c_str(), Clip(task.error_message(), 60).c_str());
  }
}

absl::StatusOr<cohort::v1::ClusterSnapshot> Snapshot(Client& client) {
  cohort::v1::ClusterSnapshot snapshot;
  auto status = client.cohort().GetClusterSnapshot(client.Context().get(), {}, &snapshot);
  if (!status.ok()) return cohort::FromGrpcStatus(status);
  return snapshot;
}

int Status(Client& client) {
  auto snapshot = Snapshot(client);
  if (!snapshot.ok()) return Fail(snapshot.status());
  if (client.json()) {
    std::cout << SnapshotJson(*snapshot).dump(2) << "\n";
    return 0;
  }
  int connected = 0, errors = 0, workload = 0;
  for (const auto& task : snapshot->tasks()) {
    if (task.auxiliary()) continue;
    ++workload;
    connected += task.state() == cohort::v1::CONNECTED;
    errors += task.state() == cohort::v1::ERROR;
  }
  std::printf(
      "coordinator incarnation %s, default job \"%s\": %d/%d workload tasks connected, "
      "%d in error%s\n",
      absl::StrCat(absl::Hex(snapshot->service_incarnation())).c_str(),
      snapshot->default_job().c_str(), connected, workload, errors,
      snapshot->cluster_registered() ? "" : ", still registering");
  if (!snapshot->job_error().empty()) {
    // Propagated to every task: the job has failed, even while its tasks still show CONNECTED
    // (until they stop or miss their heartbeats).
    std::printf("the job failed: %s\n", Clip(snapshot->job_error(), 200).c_str());
  }
  std::printf("key-value: %lld keys, %lld bytes, revision %lld\n\n",
              static_cast<long long>(snapshot->key_count()),
              static_cast<long long>(snapshot->key_bytes()),
              static_cast<long long>(snapshot->key_revision()));
  PrintTasks(*snapshot);
  if (workload < snapshot->tasks_size()) std::printf("(* auxiliary task)\n");
  if (snapshot->barriers_size() > 0) {
    std::printf("\n%-24s %-8s %-8s %-10s %s\n", "BARRIER", "COUNTER", "OPEN", "DEADLINE",
                "MISSING");
    for (const auto& b : snapshot->barriers()) {
      std::vector<std::string> missing(b.missing().begin(), b.missing().end());
      std::printf("%-24s %-8lld %-8s %-10s %s\n", b.id().c_str(),
                  static_cast<long long>(b.counter()),
                  absl::StrFormat("%.1fs", b.open_seconds()).c_str(),
                  absl::StrFormat("%.1fs", b.seconds_to_deadline()).c_str(),
                  absl::StrJoin(missing, " ").c_str());
    }
  }
  return 0;
}

// The task runtime's view: its tasks and the scheduler's tables.
struct RuntimeView {
  cohort::runtime::v1::TaskInfoReply tasks;
  cohort::runtime::v1::SchedulerInfoReply scheduler;
};

absl::StatusOr<RuntimeView> FetchRuntime(Client& client) {
  auto stub = ::Scheduler::NewStub(client.channel());
  RuntimeView view;
  grpc::Status s = stub->TaskInfo(client.Context().get(), {}, &view.tasks);
  if (s.ok()) s = stub->SchedulerInfo(client.Context().get(), {}, &view.scheduler);
  if (!s.ok()) return cohort::FromGrpcStatus(s);
  return view;
}

// The job's tasks (the coordination protocols'); with --runtime, or in the table when the
// task runtime is in use, the task runtime's tasks too.
int Tasks(Client& client, bool runtime_only) {
  absl::StatusOr<RuntimeView> runtime = FetchRuntime(client);
  if (runtime_only) {
    if (!runtime.ok()) return Fail(runtime.status());
    if (client.json()) {
      std::cout << cohort::RuntimeTasksJson(runtime->tasks, runtime->scheduler).dump(2) << "\n";
    } else {
      std::cout << cohort::RuntimeTasksTable(runtime->tasks, runtime->scheduler);
    }
    return 0;
  }
  auto snapshot = Snapshot(client);
  if (!snapshot.ok()) return Fail(snapshot.status());
  if (client.json()) {
    Json tasks = Json::array();
    for (const auto& task : snapshot->tasks()) tasks.push_back(TaskJson(task));
    std::cout << tasks.dump(2) << "\n";
    return 0;
  }
  PrintTasks(*snapshot);
  if (runtime.ok() && cohort::RuntimeInUse(runtime->tasks, runtime->scheduler)) {
    std::cout << "\n" << cohort::RuntimeTasksTable(runtime->tasks, runtime->scheduler);
  }
  return 0;
}

int Objects(Client& client) {
  absl::StatusOr<RuntimeView> runtime = FetchRuntime(client);
  if (!runtime.ok()) return Fail(runtime.status());
  if (client.json()) {
    std::cout << cohort::ObjectsJson(runtime->scheduler).dump(2) << "\n";
  } else {
    std::cout << cohort::ObjectsTable(runtime->scheduler);
  }
  return 0;
}

// Set by SIGINT/SIGTERM. An atomic, not a volatile sig_atomic_t: the signal may land on any
// thread (the watch's, gRPC's), and only an atomic orders that write with the main thread's
// read (ThreadSanitizer reported the volatile flag as a race once).
std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "a signal handler needs a lock-free flag");

void OnSignal(int) { g_interrupted.store(true, std::memory_order_relaxed); }

int Watch(Client& client, const std::string& key, int64_t revision) {
  absl::Notification done;
  absl::Status end;
  bool json = client.json();
  cohort::KeyWatcher::Options options;
  options.start_revision = revision;
  auto watcher = cohort::KeyWatcher::Start(
      client.channel(), key,
      [&](absl::StatusOr<cohort::KeyChange> change) {
        if (!change.ok()) {
          end = change.status();
          done.Notify();
          return;
        }
        if (json) {
          Json line = {{"type", cohort::KeyChangeTypeName(change->type)},
                       {"key", change->key},
                       {"revision", change->revision}};
          if (change->type != cohort::KeyChange::Type::kDeleted) line["value"] = change->value;
          std::cout << line.dump() << std::endl;
        } else {
          std::cout << cohort::KeyChangeTypeName(change->type) << " " << change->key;
          if (change->type != cohort::KeyChange::Type::kDeleted) {
            std::cout << " " << OneLine(change->value);
          }
          std::cout << std::endl;
        }
      },
      options);
  if (!watcher.ok()) return Fail(watcher.status());
  if (revision > 0) {
    std::fprintf(stderr, "watching \"%s\" from revision %lld (now %lld; Ctrl-C to stop)\n",
                 key.c_str(), static_cast<long long>(revision),
                 static_cast<long long>((*watcher)->created_revision()));
  } else {
    std::fprintf(stderr, "watching \"%s\" after revision %lld (Ctrl-C to stop)\n", key.c_str(),
                 static_cast<long long>((*watcher)->created_revision()));
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  while (!done.HasBeenNotified() && !g_interrupted.load(std::memory_order_relaxed)) {
    done.WaitForNotificationWithTimeout(absl::Milliseconds(100));
  }
  (*watcher)->Stop();
  return done.HasBeenNotified() ? Fail(end) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  cohort::InstallCrashReport(argv[0]);
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
  cohort::AddClientTlsFlags(app, &options.tls);
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

  cohort::AddVersionFlag(app);
  if (auto exit_code = cohort::ParseCommandLine(app, argc, argv)) return *exit_code;

  Client client(options);
  if (auto s = client.Init(); !s.ok()) return Fail(s);

  if (status->parsed()) return Status(client);
  if (tasks->parsed()) return Tasks(client, runtime_only);
  if (objects->parsed()) return Objects(client);

  if (get->parsed()) {
    absl::Duration wait_for;
    if (!absl::ParseDuration(wait, &wait_for) || wait_for < absl::ZeroDuration()) {
      return Fail(
          absl::InvalidArgumentError(absl::StrCat("--wait \"", wait, "\" is not a duration")));
    }
    grpc::Status s;
    std::string out;
    if (wait_for == absl::ZeroDuration()) {
      tensorflow::TryGetKeyValueRequest request;
      request.set_key(key);
      tensorflow::TryGetKeyValueResponse response;
      s = client.tf().TryGetKeyValue(client.Context().get(), request, &response);
      out = response.kv().value();
    } else {
      tensorflow::GetKeyValueRequest request;
      request.set_key(key);
      tensorflow::GetKeyValueResponse response;
      s = client.tf().GetKeyValue(client.Context(wait_for).get(), request, &response);
      if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        return Fail(
            absl::NotFoundError(absl::StrCat("key \"", key, "\" was not set within ", wait)));
      }
      out = response.kv().value();
    }
    if (!s.ok()) return Check(s);
    std::fwrite(out.data(), 1, out.size(), stdout);
    if (isatty(STDOUT_FILENO)) std::fputc('\n', stdout);
    return 0;
  }
  if (put->parsed()) {
    if (value == "-") {
      value.assign(std::istreambuf_iterator<char>(std::cin), {});
      // `echo 0.01 | cohortctl kv put lr -` stores 0.01, as $(...) would read it.
      if (!value.empty() && value.back() == '\n') value.pop_back();
      if (!value.empty() && value.back() == '\r') value.pop_back();
    }
    tensorflow::InsertKeyValueRequest request;
    request.mutable_kv()->set_key(key);
    request.mutable_kv()->set_value(value);
    request.set_allow_overwrite(overwrite);
    tensorflow::InsertKeyValueResponse response;
    auto s = client.tf().InsertKeyValue(client.Context().get(), request, &response);
    if (s.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
      return Fail(absl::AlreadyExistsError(
          absl::StrCat("key \"", key, "\" exists; use --overwrite to replace it")));
    }
    return Check(s);
  }
  if (ls->parsed()) {
    tensorflow::GetKeyValueDirRequest request;
    request.set_directory_key(key);
    tensorflow::GetKeyValueDirResponse response;
    auto s = client.tf().GetKeyValueDir(client.Context().get(), request, &response);
    if (!s.ok()) return Check(s);
    if (client.json()) {
      Json out = Json::object();
      for (const auto& kv : response.kv()) out[kv.key()] = kv.value();
      std::cout << out.dump(2) << "\n";
    } else {
      for (const auto& kv : response.kv()) {
        std::cout << kv.key() << "\t" << OneLine(kv.value()) << "\n";
      }
    }
    return 0;
  }
  if (rm->parsed()) {
    if (!prefix) {
      // The coordinator's delete takes the whole subtree; refuse rather than surprise.
      tensorflow::GetKeyValueDirRequest dir;
      dir.set_directory_key(key);
      tensorflow::GetKeyValueDirResponse under;
      auto s = client.tf().GetKeyValueDir(client.Context().get(), dir, &under);
      if (!s.ok()) return Check(s);
      if (under.kv_size() > 0) {
        return Fail(absl::FailedPreconditionError(
            absl::StrCat(under.kv_size(), " keys are under \"", key,
                         "/\"; use --prefix to remove them with it")));
      }
      tensorflow::TryGetKeyValueRequest probe;
      probe.set_key(key);
      tensorflow::TryGetKeyValueResponse found;
      s = client.tf().TryGetKeyValue(client.Context().get(), probe, &found);
      if (!s.ok()) return Check(s);
    }
    tensorflow::DeleteKeyValueRequest request;
    request.set_key(key);
    request.set_is_directory(prefix);
    tensorflow::DeleteKeyValueResponse response;
    return Check(client.tf().DeleteKeyValue(client.Context().get(), request, &response));
  }
  if (watch->parsed()) return Watch(client, key, revision);
  if (incr->parsed()) {
    tensorflow::IncrementKeyValueRequest request;
    request.set_key(key);
    request.set_increment(delta);
    tensorflow::IncrementKeyValueResponse response;
    auto s = client.tf().IncrementKeyValue(client.Context().get(), request, &response);
    if (!s.ok()) return Check(s);
    std::cout << response.kv().value() << "\n";
    return 0;
  }

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
