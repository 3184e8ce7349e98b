// cohort-coordinator: the standalone coordination service.
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/command_line.h"
#include "common/crash_report.h"
#include "common/grpc_auth.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/process.h"
#include "common/yaml_config.h"
#include "runtime/rpc/scheduler_metrics.h"
#include "runtime/rpc/scheduler_service.h"
#include "runtime/rpc/scheduler_transport.h"
#include "service/core/coordination_service.h"
#include "service/server/coordinator_metrics.h"
#include "service/server/coordinator_server.h"
#include "service/state/earlier_gangs.h"
#include "service/state/state_store.h"
#include "service/torch/torch_store_server.h"
#include "spdlog/spdlog.h"

namespace {

using cohort::JobConfig;

// "NAME=COUNT"
absl::StatusOr<JobConfig> ParseJob(const std::string& text, const char* flag) {
  std::vector<std::string> parts = absl::StrSplit(text, absl::MaxSplits('=', 1));
  JobConfig job;
  if (parts.size() != 2 || parts[0].empty() || !absl::SimpleAtoi(parts[1], &job.num_tasks)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " \"", text, "\" is not NAME=COUNT (for example worker=4)"));
  }
  job.name = parts[0];
  return job;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "cohort-coordinator: %s\n", std::string(status.message()).c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  cohort::InstallCrashReport(argv[0]);
  cohort::DisableMutexDeadlockDetection();
  CLI::App app{
      "cohort-coordinator: a standalone coordination service for distributed training.\n"
      "Speaks tensorflow.CoordinationService (TensorFlow, jaxlib <= 0.9),\n"
      "xla.coordination.CoordinationService (jaxlib >= 0.10) and xla.DistributedRuntimeService\n"
      "(old jaxlib) on one port, backed by one state machine.\n\n"
      "Example: cohort-coordinator --job worker=4 --heartbeat-timeout 100s",
      "cohort-coordinator"};
  app.get_formatter()->column_width(40);
  cohort::AddYamlConfigOption(app);

  cohort::ServerOptions server;
  std::vector<std::string> jobs, aux_jobs, recoverable;
  std::string default_job, heartbeat = "100s", reg = "5m", shutdown = "5m";
  std::string barrier_retention = "1h";
  std::string log_format = "text", log_level = "info";
  bool register_barrier = true;
  cohort::ServiceConfig config;
  uint64_t incarnation = 0;
  std::string state_dir, state_sync = "0", state_prune_before;
  int64_t state_compact_bytes = 0;
  cohort::runtime::SchedulerOptions task_options;
  std::string task_liveness = "5s";
  std::string auth_token_file;
  cohort::torch::TorchStoreServerOptions torch_store;
  bool torch_store_insecure = false;

  app.add_option("--listen", server.listen, "gRPC address for every protocol")
      ->capture_default_str();
  app.add_option("--http-listen", server.http_listen,
                 "address of /metrics, /healthz and /readyz (empty: none)")
      ->capture_default_str();
  app.add_option("--job", jobs, "workload job NAME=COUNT (repeatable)")->take_all();
  app.add_option("--auxiliary-job", aux_jobs,
                 "auxiliary job NAME=COUNT, e.g. the sidecars; left out of every "
                 "\"all tasks\" set, but its errors reach everyone (repeatable)")
      ->take_all();
  app.add_option("--recoverable-job", recoverable,
                 "job whose tasks may re-register with a new incarnation after an error; its "
                 "errors do not propagate (repeatable)")
      ->take_all();
  app.add_option("--default-job", default_job,
                 "job for requests without a job name (xla.* protocols); default: the only "
                 "workload job");
  app.add_option("--heartbeat-timeout", heartbeat,
                 "a task without a heartbeat for this long is set to error; clients send one "
                 "every half of THEIR OWN timeout (jaxlib: 100s), so keep this at least theirs")
      ->capture_default_str();
  app.add_option("--register-timeout", reg,
                 "how long the register barrier waits for every task, from the first")
      ->capture_default_str();
  app.add_option("--shutdown-barrier-timeout", shutdown,
                 "how long ShutdownTask waits for every task; 0 turns the barrier off")
      ->capture_default_str();
  app.add_flag("--register-barrier,!--no-register-barrier", register_barrier,
               "RegisterTask blocks until every workload task registered (default on)");
  app.add_option("--max-key-bytes", config.key_value.max_key_bytes, "largest key")
      ->capture_default_str();
  app.add_option("--max-value-bytes", config.key_value.max_value_bytes, "largest value")
      ->capture_default_str();
  app.add_option("--max-store-bytes", config.key_value.max_total_bytes,
                 "largest total of keys and values")
      ->capture_default_str();
  app.add_option("--max-parked-calls-per-task", config.parked.max_per_task,
                 "blocking calls one task may have waiting")
      ->capture_default_str();
  app.add_option("--max-parked-calls", config.parked.max_total, "blocking calls waiting in all")
      ->capture_default_str();
  app.add_option("--max-parked-calls-without-task", config.parked.max_without_task_per_kind,
                 "blocking calls of one kind that name no task (blocking gets, key watches) "
                 "waiting at once; 0: --max-parked-calls-per-task times the tasks of all jobs")
      ->capture_default_str();
  app.add_option("--max-barrier-id-bytes", config.barriers.max_id_bytes, "longest barrier id")
      ->capture_default_str();
  app.add_option("--max-open-barriers", config.barriers.max_open, "barriers open at once")
      ->capture_default_str();
  app.add_option("--max-finished-barriers", config.barriers.max_finished,
                 "finished barriers kept to answer repeated calls")
      ->capture_default_str();
  app.add_option("--finished-barrier-retention", barrier_retention,
                 "how long a finished barrier is kept to answer repeated calls (a retry, a "
                 "sidecar's re-send after an outage); then its id starts afresh")
      ->capture_default_str();
  app.add_option("--service-incarnation", incarnation,
                 "fixed service incarnation (default random, or the one saved in --state-dir). "
                 "xla-protocol clients stop when it changes");
  app.add_option("--state-dir", state_dir,
                 "keep the durable state here (tasks, incarnations, keys, barrier outcomes, "
                 "errors, and the task runtime's workers, stores, tasks and objects): a "
                 "coordinator started again on it carries on where this one stopped. "
                 "Default: none, state in memory only");
  app.add_option("--state-prune-before", state_prune_before,
                 "DIR/NAME, NAME as the operator names a gang's state directory "
                 "(YYYYMMDDTHHMMSSZ-gang-N): at the start, remove the directories in DIR named "
                 "so that come before NAME, the state of a job's earlier gangs on the volume "
                 "that holds --state-dir (the operator mounts the whole claim at DIR). "
                 "Nothing else in DIR is touched");
  app.add_option("--state-compact-bytes", state_compact_bytes,
                 "a state log this long (and twice the last snapshot) is replaced by a new "
                 "snapshot; 0: an eighth of the volume that holds --state-dir, from 1 MiB to "
                 "64 MiB")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--state-sync-interval", state_sync,
                 "0: nothing is acknowledged (no answer, no released wait, no watch event) "
                 "before the change it follows is synced to disk, the answers that wait "
                 "together sharing one fdatasync (group commit). Above 0, the opt-in faster "
                 "mode: answers go out once the change is written (it survives the process), "
                 "and the log is synced this often, so a crash of the whole machine can lose "
                 "this much of what was acknowledged")
      ->capture_default_str();
  app.add_option("--tls-cert", server.tls.cert, "PEM certificate chain; enables TLS");
  app.add_option("--tls-key", server.tls.key, "PEM private key for --tls-cert");
  app.add_option("--tls-client-ca", server.tls.client_ca,
                 "PEM CA that client certificates must be signed by (mutual TLS)");
  app.add_option("--tls-client-name", server.tls.client_name,
                 "with --tls-client-ca: the name (DNS name or common name) every client "
                 "certificate must carry, for a CA that signs other jobs' certificates too");
  app.add_option("--tls-refresh", server.tls.refresh,
                 "how often the TLS files are read again, so that a renewed certificate is "
                 "served from the next connection on")
      ->capture_default_str();
  app.add_option("--auth-token-file", auth_token_file,
                 "file holding the job's token: every gRPC call must carry metadata "
                 "\"authorization: Bearer <token>\" or is refused UNAUTHENTICATED (the "
                 "sidecars attach it for the workload). /metrics, /healthz and /readyz stay "
                 "open. Default: no token, like upstream");
  app.add_option("--torch-store-listen", torch_store.listen,
                 "HOST:PORT to serve PyTorch's TCPStore protocol on (torch.distributed.TCPStore "
                 "clients, is_master=False), its keys in the coordinator's store under torch/ "
                 "(docs/pytorch.md). With --auth-token-file only a loopback address, unless "
                 "--torch-store-insecure. Default: not served");
  app.add_option("--torch-store-max-connections", torch_store.max_connections,
                 "TCPStore connections served at once; past it a new one is closed")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--torch-store-insecure", torch_store_insecure,
               "serve --torch-store-listen beyond loopback although the coordinator has a "
               "token: the TCPStore protocol carries no credentials, so anyone who reaches the "
               "port reads and writes the torch keys");
  app.add_option("--task-retries", task_options.max_task_retries,
                 "task runtime: how many times a task whose worker was lost is started again "
                 "before it fails (a task that raises is never retried)")
      ->capture_default_str();
  app.add_option("--task-liveness-timeout", task_liveness,
                 "task runtime: a worker or object store that does not answer the scheduler's "
                 "probes (every second) for this long is lost: its task runs again, and what "
                 "only it held is computed again or reported lost")
      ->capture_default_str();
  cohort::runtime::SchedulerLimits& limits = task_options.limits;
  for (const auto& [flag, value, what] : std::vector<std::tuple<const char*, size_t*, const char*>>{
           {"--max-tasks", &limits.max_tasks,
            "task runtime: tasks and puts the scheduler keeps: those not finished, and the "
            "finished ones of --task-history"},
           {"--max-objects", &limits.max_objects, "task runtime: object ids the scheduler keeps"},
           {"--max-task-workers", &limits.max_workers,
            "task runtime: workers and drivers registered at once"},
           {"--max-object-stores", &limits.max_stores,
            "task runtime: object stores registered at once"},
           {"--max-functions", &limits.max_functions,
            "task runtime: names in the scheduler's function table"},
           {"--max-export-bytes", &limits.max_export_bytes,
            "task runtime: bytes of exported functions and reusable variables, in all"},
           {"--max-ids-per-call", &limits.max_ids_per_call,
            "task runtime: object ids one call names (counts, contained ids, a task's "
            "arguments)"}}) {
    app.add_option(flag, *value, std::string(what) + "; past it: RESOURCE_EXHAUSTED")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
  }
  app.add_option("--task-history", limits.task_history,
                 "task runtime: finished tasks and puts kept, the newest, as the lineage a lost "
                 "object is computed again from; the oldest past it is forgotten, with the "
                 "records of its results that were let go (0: none kept). Keep it below "
                 "--max-tasks")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--log-format", log_format, "text or json")->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn or error")
      ->capture_default_str();
  cohort::AddVersionFlag(app);
  if (auto exit_code = cohort::ParseCommandLine(app, argc, argv)) return *exit_code;

  if (auto s = cohort::SetUpLogging("coordinator", log_format, log_level); !s.ok()) return Fail(s);
  for (const auto& [list, aux] : {std::pair{&jobs, false}, std::pair{&aux_jobs, true}}) {
    for (const std::string& text : *list) {
      auto job = ParseJob(text, aux ? "--auxiliary-job" : "--job");
      if (!job.ok()) return Fail(job.status());
      job->auxiliary = aux;
      config.jobs.push_back(*job);
    }
  }
  for (const std::string& name : recoverable) {
    bool found = false;
    for (JobConfig& job : config.jobs) {
      if (job.name == name) job.recoverable = found = true;
    }
    if (!found) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "--recoverable-job ", name, " is not a job given with --job or --auxiliary-job")));
    }
  }
  config.default_job = default_job;
  config.register_barrier = register_barrier;
  config.service_incarnation = incarnation;
  auto hb = cohort::ParseDurationFlag("--heartbeat-timeout", heartbeat);
  auto rt = cohort::ParseDurationFlag("--register-timeout", reg);
  auto st = cohort::ParseDurationFlag("--shutdown-barrier-timeout", shutdown);
  auto br = cohort::ParseDurationFlag("--finished-barrier-retention", barrier_retention);
  for (const auto* d : {&hb, &rt, &st, &br}) {
    if (!d->ok()) return Fail(d->status());
  }
  auto sync = cohort::ParseDurationFlag("--state-sync-interval", state_sync);
  if (!sync.ok()) return Fail(sync.status());
  auto liveness = cohort::ParseDurationFlag("--task-liveness-timeout", task_liveness);
  if (!liveness.ok()) return Fail(liveness.status());
  if (*liveness < absl::Seconds(2)) {
    return Fail(absl::InvalidArgumentError(
        "--task-liveness-timeout must be at least 2s: workers and stores are probed every second"));
  }
  if (task_options.max_task_retries < 0) {
    return Fail(absl::InvalidArgumentError("--task-retries must be 0 or more"));
  }
  task_options.liveness_timeout = *liveness;
  if (!auth_token_file.empty()) {
    auto token = cohort::ReadAuthTokenFile(auth_token_file, "--auth-token-file");
    if (!token.ok()) return Fail(token.status());
    server.auth_token = *token;
  }
  if (!torch_store.listen.empty() && !server.auth_token.empty() && !torch_store_insecure &&
      !cohort::IsLoopbackListenAddress(torch_store.listen)) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--torch-store-listen ", torch_store.listen,
        " is not a loopback address, and the TCPStore protocol carries no token: serve it on "
        "loopback (the pods' sidecars carry it to the coordinator with the token), or give "
        "--torch-store-insecure to let anyone who reaches the port use the torch keys")));
  }
  if (task_options.limits.task_history >= task_options.limits.max_tasks) {
    spdlog::warn(
        "--task-history {} is not below --max-tasks {}: finished tasks can fill "
        "--max-tasks, and then every SubmitTask and PutObj is refused",
        task_options.limits.task_history, task_options.limits.max_tasks);
  }
  server.max_receive_message_bytes = cohort::MaxMessageBytes(config);
  config.heartbeat_timeout = *hb;
  config.register_timeout = *rt;
  config.shutdown_barrier_timeout = *st;
  config.barriers.finished_retention = *br;

  // Signals are taken by Wait below; every thread started later inherits the mask.
  const cohort::StopSignals signals;

  cohort::RealClock clock;
  cohort::MetricsRegistry registry;
  cohort::CoordinatorMetrics metrics(registry);
  // The task runtime's scheduler, on the same port; its state is kept with the service's.
  task_options.on_dispatch = cohort::runtime::AddSchedulingLatencyMetric(registry);
  cohort::runtime::TaskScheduler scheduler(clock, task_options);
  std::unique_ptr<cohort::StateStore> store;
  std::optional<cohort::DurableState> restored;
  if (!state_prune_before.empty() && state_dir.empty()) {
    return Fail(absl::InvalidArgumentError(
        "--state-prune-before needs --state-dir (it frees the volume that holds it)"));
  }
  if (!state_dir.empty()) {
    if (auto s = cohort::ValidateConfig(config); !s.ok()) return Fail(s);
    if (config.key_value.max_value_bytes + config.key_value.max_key_bytes >=
        (size_t{1} << 31) - 4096) {
      return Fail(absl::InvalidArgumentError(
          "with --state-dir, --max-value-bytes must stay below 2 GiB (a saved change holds "
          "one value)"));
    }
    if (!state_prune_before.empty()) {
      // Before the state is opened, whose first snapshot needs room on the same volume.
      auto removed = cohort::RemoveEarlierGangStates(state_prune_before);
      if (removed.status().code() == absl::StatusCode::kInvalidArgument ||
          removed.status().code() == absl::StatusCode::kNotFound) {
        return Fail(removed.status());
      }
      if (!removed.ok()) {
        spdlog::warn("{}; starting anyway, the volume keeps it",
                     std::string(removed.status().message()));
      } else {
        for (const cohort::RemovedState& r : *removed) {
          spdlog::info("removed the state of an earlier gang of this job: {} ({} bytes)", r.path,
                       r.bytes);
        }
      }
    }
    cohort::StateStoreOptions options;
    options.dir = state_dir;
    options.sync_interval = *sync;
    options.compact_bytes = state_compact_bytes;
    auto opened = cohort::StateStore::Open(options, config, &restored, &scheduler);
    if (opened.status().code() == absl::StatusCode::kDataLoss) {
      // Damage a crash cannot leave (a torn tail is dropped on its own): say how to go on.
      return Fail(absl::DataLossError(absl::StrCat(
          opened.status().message(),
          ". The saved state cannot be read back whole; to start "
          "afresh without it (every client registers again, the keys are gone), move it aside: "
          "mv ",
          state_dir, " ", state_dir, ".damaged")));
    }
    if (!opened.ok()) return Fail(opened.status());
    store = std::move(*opened);
  }
  auto service = cohort::CoordinationService::Create(config, &clock, &metrics, store.get(),
                                                     restored ? &*restored : nullptr);
  if (!service.ok()) return Fail(service.status());
  if (store) {
    if (auto s = scheduler.FinishRestore(); !s.ok()) return Fail(s);
    if (auto s = store->Start(service->get(), &scheduler); !s.ok()) return Fail(s);
    scheduler.SetJournal(store.get());
    cohort::AddStateMetrics(registry, store.get(), restored.has_value());
  }
  restored.reset();
  metrics.Attach(service->get());
  for (const JobConfig& job : config.jobs) {
    spdlog::info("job {}: {}{}{}", job.name, cohort::Plural(job.num_tasks, "task"),
                 job.auxiliary ? " (auxiliary)" : "", job.recoverable ? " (recoverable)" : "");
  }
  cohort::runtime::AddSchedulerMetrics(registry, &scheduler);
  std::unique_ptr<cohort::CallAuth> scheduler_auth;
  if (!server.auth_token.empty()) {
    scheduler_auth = std::make_unique<cohort::CallAuth>(server.auth_token);
  }
  cohort::runtime::SchedulerService scheduler_service(&scheduler, scheduler_auth.get(),
                                                      store.get());
  cohort::runtime::TransportOptions transport_options;
  transport_options.auth_token = server.auth_token;
  cohort::runtime::SchedulerTransport transport(&scheduler, transport_options);
  server.extra_services.push_back(&scheduler_service);
  cohort::CoordinatorServer coordinator(service->get(), &registry, server);
  if (auto s = coordinator.Start(); !s.ok()) return Fail(s);
  transport.Start();
  std::unique_ptr<cohort::torch::TorchStoreMetrics> torch_metrics;  // outlives the server
  std::unique_ptr<cohort::torch::TorchStoreServer> torch_server;
  if (!torch_store.listen.empty()) {
    torch_metrics = std::make_unique<cohort::torch::TorchStoreMetrics>(
        registry, "cohort_coordinator", /*held=*/false);
    torch_store.metrics = torch_metrics.get();
    torch_server = std::make_unique<cohort::torch::TorchStoreServer>(service->get(), torch_store);
    if (auto s = torch_server->Start(); !s.ok()) return Fail(s);
    spdlog::info("serving PyTorch's TCPStore protocol on {} (port {})", torch_store.listen,
                 torch_server->port());
  }

  spdlog::info("received {}; ending parked calls and exiting",
               cohort::StopSignals::Name(signals.Wait()));
  transport.Stop();
  if (torch_server) torch_server->Stop();
  coordinator.Shutdown(absl::UnavailableError(
      "the coordinator is shutting down (it received a termination signal)"));
  if (store) store->Stop();
  return 0;
}
