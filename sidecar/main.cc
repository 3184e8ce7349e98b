// cohort-sidecar: the agent of one worker pod.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/command_line.h"
#include "common/crash_report.h"
#include "common/grpc_auth.h"
#include "common/grpc_tls.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/process.h"
#include "common/yaml_config.h"
#include "sidecar/sidecar.h"
#include "spdlog/spdlog.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "cohort-sidecar: %s\n", message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  cohort::InstallCrashReport(argv[0]);
  cohort::DisableMutexDeadlockDetection();
  CLI::App app{
      "cohort-sidecar: runs in every worker pod next to the workload. It registers the pod with\n"
      "the coordinator (in the auxiliary sidecar job), publishes the node's GPUs and hands rank\n"
      "and cluster topology to the workload (cluster.json and cluster.env in --handoff-dir,\n"
      "and GET /v1/cluster), serves GPU and agent metrics, and reports a GPU fault or the\n"
      "workload's exit to the coordinator at once.\n\n"
      "Identity comes from the env the cohort operator injects (COHORT_COORDINATOR_ADDRESS,\n"
      "COHORT_JOB_NAME, COHORT_TASK_ID, COHORT_NUM_TASKS, POD_NAME, POD_NAMESPACE, POD_IP);\n"
      "flags override it.",
      "cohort-sidecar"};
  app.get_formatter()->column_width(40);
  cohort::AddYamlConfigOption(app);
  cohort::SidecarOptions options;
  options.coordinator.address = cohort::EnvOr("COHORT_COORDINATOR_ADDRESS");
  options.task.workload_job = cohort::EnvOr("COHORT_JOB_NAME", "worker");
  std::string task = cohort::EnvOr("COHORT_TASK_ID", "0"),
              num_tasks = cohort::EnvOr("COHORT_NUM_TASKS", "1");
  options.task.pod.pod = cohort::EnvOr("POD_NAME", cohort::EnvOr("HOSTNAME"));
  options.task.pod.namespace_name = cohort::EnvOr("POD_NAMESPACE");
  options.task.pod_ip = cohort::EnvOr("POD_IP");
  std::string sample = "5s", heartbeat = "5s", heartbeat_timeout = "30s", reg = "10m";
  std::string liveness = "none", stale = "10s", ignore_xids = "13,31,43,45,68,109";
  std::string log_format = "text", log_level = "info", outage_tolerance = "60s";

  app.add_option("--coordinator", options.coordinator.address,
                 "coordinator gRPC address ($COHORT_COORDINATOR_ADDRESS)");
  app.add_option("--job", options.task.workload_job, "the workload's job ($COHORT_JOB_NAME)")
      ->capture_default_str();
  app.add_option("--task", task, "this pod's worker index ($COHORT_TASK_ID)")
      ->capture_default_str();
  app.add_option("--num-tasks", num_tasks, "workers in the job ($COHORT_NUM_TASKS)")
      ->capture_default_str();
  app.add_option("--sidecar-job", options.registration.sidecar_job,
                 "auxiliary job the sidecars register in (the coordinator's --auxiliary-job)")
      ->capture_default_str();
  app.add_option("--pod", options.task.pod.pod, "pod name for metric labels ($POD_NAME)");
  app.add_option("--namespace", options.task.pod.namespace_name,
                 "namespace for metric labels ($POD_NAMESPACE)");
  app.add_option("--pod-ip", options.task.pod_ip, "this pod's address, told to peers ($POD_IP)");
  app.add_option("--http-listen", options.http.listen,
                 "address of /metrics /healthz /readyz /v1/cluster /v1/alive")
      ->capture_default_str();
  app.add_option("--handoff-dir", options.registration.handoff_dir,
                 "shared volume for cluster.json and cluster.env (empty: HTTP only)");
  app.add_option("--sample-interval", sample, "how often GPUs are sampled")->capture_default_str();
  app.add_option("--heartbeat-interval", heartbeat, "heartbeat period")->capture_default_str();
  app.add_option("--heartbeat-timeout", heartbeat_timeout,
                 "give up on the coordinator after this long without a heartbeat")
      ->capture_default_str();
  app.add_option("--register-timeout", reg, "how long one registration attempt may take")
      ->capture_default_str();
  app.add_option("--nvml-library", options.gpus.monitor.library_path,
                 "libnvidia-ml.so.1 to load ($COHORT_NVML_LIBRARY, else the loader's search)");
  app.add_option("--ignore-xids", ignore_xids,
                 "XIDs that leave a GPU healthy (application errors), comma-separated")
      ->capture_default_str();
  std::string expected_gpus = cohort::EnvOr("COHORT_EXPECTED_GPUS");
  app.add_option("--expected-gpus", expected_gpus,
                 "GPUs the pod's workload asks for (its nvidia.com/gpu limits; "
                 "$COHORT_EXPECTED_GPUS): fewer seen is an error in the log and in "
                 "cohort_sidecar_gpus_missing; empty: unknown");
  options.gpus.pod_resources_socket = cohort::EnvOr("COHORT_POD_RESOURCES_SOCKET");
  app.add_option("--pod-resources-socket", options.gpus.pod_resources_socket,
                 "the kubelet's PodResources socket ($COHORT_POD_RESOURCES_SOCKET): when NVML "
                 "shows the node's GPUs, watch only those the kubelet gave the pod's other "
                 "containers; empty: every GPU NVML shows is the pod's");
  app.add_option("--gpu-resource", options.gpus.pod_gpu_resources,
                 "extended resources whose devices are the pod's GPUs (a name, or a prefix "
                 "before '-': nvidia.com/mig), with --pod-resources-socket; repeatable")
      ->capture_default_str();
  std::string gpu_uuids;
  app.add_option("--gpu-uuids", gpu_uuids,
                 "the pod's GPUs, comma-separated UUIDs (GPU-...): watch only these of the GPUs "
                 "NVML shows");
  app.add_flag("--dcgm-metrics", options.gpus.dcgm_metrics,
               "also export DCGM exporter's metric names (DCGM_FI_DEV_*)");
  app.add_option("--workload-liveness", liveness,
                 "how to notice the workload exiting: process (shared process namespace), "
                 "file, http, or none")
      ->capture_default_str();
  app.add_option("--workload-process", options.workload.process_pattern,
                 "process: regex over the workload's command line");
  app.add_option("--liveness-file", options.workload.liveness_file,
                 "file: the file the workload touches");
  app.add_option("--liveness-timeout", stale, "file, http: stale after this long")
      ->capture_default_str();
  std::string progress_timeout = "0", stack_dump_timeout = "10s";
  options.progress.progress_file = cohort::EnvOr("COHORT_PROGRESS_FILE");
  app.add_option("--progress-timeout", progress_timeout,
                 "report the task as hung (reason Hang) when its workload, alive, shows no "
                 "progress for this long from the gang's registration on: no write to "
                 "--progress-file, no finished call through the proxy other than heartbeats, "
                 "no GPU activity (once it has written the file, only its writes count); "
                 "0: never (cohort_task_* metrics are served all the same)")
      ->capture_default_str();
  app.add_option("--progress-file", options.progress.progress_file,
                 "the file the workload writes at each step, its step number on the last line "
                 "when it has one ($COHORT_PROGRESS_FILE); empty: none");
  app.add_option("--stack-dump-timeout", stack_dump_timeout,
                 "before a hang is reported, how long each stack tool may take to record the "
                 "workload's stacks (py-spy, eu-stack, gdb: those on PATH, in that order, until "
                 "one works; needs --workload-liveness process and leave to trace it)")
      ->capture_default_str();
  app.add_option("--proxy-listen", options.proxy.listen,
                 "serve the workload's coordinator endpoint here (in a pod 127.0.0.1:8476): "
                 "every coordinator protocol, forwarded to --coordinator, riding out its "
                 "restarts; empty: no proxy");
  app.add_option("--torch-store-proxy-listen", options.proxy.torch_store_listen,
                 "with --proxy-listen, also serve PyTorch's TCPStore protocol here (loopback; in "
                 "a pod 127.0.0.1:29500, where MASTER_ADDR/MASTER_PORT point): the pod's "
                 "torch.distributed stores, forwarded to the coordinator's, riding out its "
                 "restarts (docs/pytorch.md); empty: not served");
  app.add_option("--outage-tolerance", outage_tolerance,
                 "how long the proxy holds calls while the coordinator is unreachable before "
                 "they fail UNAVAILABLE")
      ->capture_default_str();
  cohort::runtime::ObjectStoreOptions objstore;
  objstore.listen.clear();
  app.add_option("--objstore-listen", objstore.listen,
                 "host the pod's task runtime object store here (HOST:PORT); empty: none");
  app.add_option("--objstore-advertise", objstore.advertise,
                 "the address the scheduler, other stores and the pod's workers reach the store "
                 "at (default: --pod-ip with the listen port)");
  uint64_t objstore_capacity = uint64_t{1} << 30;
  app.add_option("--objstore-capacity", objstore_capacity,
                 "the store's capacity in bytes; a put past it is refused")
      ->capture_default_str();
  objstore.flag_prefix = "objstore-";
  app.add_flag("--objstore-insecure-no-auth", objstore.insecure_no_auth,
               "serve the store beyond loopback without --auth-token-file: anyone who reaches "
               "its port can read, replace and delete objects (refused otherwise)");
  app.add_option("--objstore-shm-dir", objstore.shm_dir,
                 "where the store keeps objects as files the pod's workers map (a memory-backed "
                 "volume shared with the workload); empty: in the store's memory")
      ->capture_default_str();
  app.add_flag("--task-runtime", options.task_runtime,
               "the pod runs task workers, not a gang's task: no agent registers, the workload's "
               "exit is nobody's error (needs --objstore-listen and --proxy-listen)");
  std::string auth_token_file;
  app.add_option("--auth-token-file", auth_token_file,
                 "file with the job's token for a coordinator run with --auth-token-file: sent "
                 "with the sidecar's calls and, through the proxy, the workload's");
  cohort::ClientTls tls;
  cohort::AddClientTlsFlags(app, &tls);
  app.add_option("--log-format", log_format, "text or json")->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn or error")
      ->capture_default_str();
  cohort::AddVersionFlag(app);
  if (auto exit_code = cohort::ParseCommandLine(app, argc, argv)) return *exit_code;
  if (auto s = cohort::SetUpLogging("sidecar", log_format, log_level); !s.ok()) {
    return Fail(std::string(s.message()));
  }

  if (options.coordinator.address.empty()) {
    return Fail("no coordinator: set --coordinator or COHORT_COORDINATOR_ADDRESS");
  }
  if (!absl::SimpleAtoi(task, &options.task.task_id) || options.task.task_id < 0) {
    return Fail(absl::StrCat("task \"", task, "\" is not a worker index (0, 1, ...)"));
  }
  if (!absl::SimpleAtoi(num_tasks, &options.task.num_tasks) ||
      options.task.num_tasks <= options.task.task_id) {
    return Fail(absl::StrCat("--num-tasks \"", num_tasks, "\" must be a count above task ",
                             options.task.task_id));
  }
  if (!expected_gpus.empty() && (!absl::SimpleAtoi(expected_gpus, &options.gpus.expected_gpus) ||
                                 options.gpus.expected_gpus < 0)) {
    return Fail(
        absl::StrCat("--expected-gpus \"", expected_gpus, "\" is not a count of GPUs (0, 1, ...)"));
  }
  for (absl::string_view uuid : absl::StrSplit(gpu_uuids, ',', absl::SkipWhitespace())) {
    options.gpus.gpu_uuids.emplace_back(absl::StripAsciiWhitespace(uuid));
  }
  if (!options.gpus.gpu_uuids.empty() && !options.gpus.pod_resources_socket.empty()) {
    return Fail(
        "--gpu-uuids and --pod-resources-socket both say which GPUs are the pod's: "
        "give one");
  }
  options.task.pod.job = options.task.workload_job;
  options.task.pod.task = absl::StrCat(options.task.task_id);
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  options.task.pod.hostname = host;
  for (auto [text, out, flag] :
       {std::tuple{&sample, &options.gpus.sample_interval, "--sample-interval"},
        std::tuple{&heartbeat, &options.registration.heartbeat_interval, "--heartbeat-interval"},
        std::tuple{&heartbeat_timeout, &options.registration.unreachable_timeout,
                   "--heartbeat-timeout"},
        std::tuple{&reg, &options.registration.register_timeout, "--register-timeout"},
        std::tuple{&stale, &options.workload.stale_after, "--liveness-timeout"},
        std::tuple{&outage_tolerance, &options.proxy.outage_tolerance, "--outage-tolerance"}}) {
    auto d = cohort::ParseDurationFlag(flag, *text, /*zero_ok=*/false);
    if (!d.ok()) return Fail(std::string(d.status().message()));
    *out = *d;
  }
  {
    auto d = cohort::ParseDurationFlag("--progress-timeout", progress_timeout, /*zero_ok=*/true);
    if (!d.ok()) return Fail(std::string(d.status().message()));
    options.progress.timeout = *d;
    d = cohort::ParseDurationFlag("--stack-dump-timeout", stack_dump_timeout, /*zero_ok=*/false);
    if (!d.ok()) return Fail(std::string(d.status().message()));
    options.stacks.timeout = *d;
  }
  if (!options.proxy.listen.empty()) {
    if (auto s = cohort::ValidateListenAddress(options.proxy.listen); !s.ok()) {
      return Fail(absl::StrCat("--proxy-listen: ", s.message()));
    }
  }
  if (!options.proxy.torch_store_listen.empty()) {
    if (options.proxy.listen.empty()) {
      return Fail("--torch-store-proxy-listen needs --proxy-listen (its way to the coordinator)");
    }
    if (auto s = cohort::ValidateListenAddress(options.proxy.torch_store_listen); !s.ok()) {
      return Fail(absl::StrCat("--torch-store-proxy-listen: ", s.message()));
    }
    if (!cohort::IsLoopbackListenAddress(options.proxy.torch_store_listen)) {
      return Fail(absl::StrCat(
          "--torch-store-proxy-listen ", options.proxy.torch_store_listen,
          ": loopback only (127.0.0.1 or [::1]): torch's protocol carries no credentials, and "
          "the proxy would lend anyone who reaches it the job's token"));
    }
  }
  if (!objstore.listen.empty()) {
    if (auto s = cohort::ValidateListenAddress(objstore.listen); !s.ok()) {
      return Fail(absl::StrCat("--objstore-listen: ", s.message()));
    }
    if (objstore_capacity == 0) return Fail("--objstore-capacity must be above 0");
    objstore.capacity_bytes = objstore_capacity;
    if (objstore.advertise.empty() && !options.task.pod_ip.empty()) {
      std::string port = objstore.listen.substr(objstore.listen.rfind(':') + 1);
      if (port == "0") return Fail("--objstore-listen with port 0 needs --objstore-advertise");
      objstore.advertise = absl::StrCat(options.task.pod_ip.find(':') != std::string::npos
                                            ? "[" + options.task.pod_ip + "]"
                                            : options.task.pod_ip,
                                        ":", port);
    }
    options.objstore = objstore;
  }
  if (options.task_runtime && (!options.objstore || options.proxy.listen.empty())) {
    return Fail(
        "--task-runtime needs --objstore-listen (the pod's object store) and "
        "--proxy-listen (the workers' way to the scheduler)");
  }
  if (!auth_token_file.empty()) {
    auto token = cohort::ReadAuthTokenFile(auth_token_file, "--auth-token-file");
    if (!token.ok()) return Fail(std::string(token.status().message()));
    options.coordinator.auth_token = *token;
  }
  // Signals are taken by Wait below. Blocked before the first gRPC call, which starts gRPC's
  // own threads: every thread inherits the mask, so none dies of Kubernetes' SIGTERM.
  const cohort::StopSignals signals;

  grpc::ChannelArguments unused;
  auto credentials = cohort::ClientCredentials(tls, &unused);
  if (!credentials.ok()) return Fail(std::string(credentials.status().message()));
  if (tls.enabled()) {
    options.coordinator.credentials = *credentials;
    options.coordinator.tls_server_name = tls.server_name;
  }
  if (options.registration.unreachable_timeout < options.registration.heartbeat_interval) {
    return Fail("--heartbeat-timeout must be at least --heartbeat-interval");
  }
  options.gpus.monitor.health_policy.ignored_xids.clear();
  for (absl::string_view part : absl::StrSplit(ignore_xids, ',', absl::SkipWhitespace())) {
    uint64_t xid = 0;
    if (!absl::SimpleAtoi(part, &xid)) {
      return Fail(absl::StrCat("--ignore-xids: \"", part, "\" is not an XID number"));
    }
    options.gpus.monitor.health_policy.ignored_xids.insert(xid);
  }
  if (!cohort::WorkloadWatch::ParseMode(liveness, &options.workload.mode)) {
    return Fail(absl::StrCat("--workload-liveness \"", liveness,
                             "\" is not one of process, file, http, none"));
  }
  if (options.workload.mode == cohort::WorkloadWatch::Mode::kProcess) {
    if (options.workload.process_pattern.empty()) {
      return Fail("--workload-liveness process needs --workload-process REGEX");
    }
    try {
      std::regex check(options.workload.process_pattern);
    } catch (const std::regex_error& e) {
      return Fail(absl::StrCat("--workload-process: not a regex: ", e.what()));
    }
  }
  if (options.workload.mode == cohort::WorkloadWatch::Mode::kFile &&
      options.workload.liveness_file.empty()) {
    return Fail("--workload-liveness file needs --liveness-file PATH");
  }

  cohort::MetricsRegistry registry;
  spdlog::info("TLS to the coordinator: {}",
               !tls.enabled()     ? "off (plain gRPC; see --tls-ca)"
               : tls.cert.empty() ? "on, verifying it, without a client certificate"
                                  : "mutual, with the client certificate " + tls.cert);
  cohort::Sidecar sidecar(options, &registry);
  if (auto s = sidecar.Start(); !s.ok()) return Fail(std::string(s.message()));
  spdlog::info("received {}: shutting down (not a failure)",
               cohort::StopSignals::Name(signals.Wait()));
  sidecar.Stop();
  return 0;
}
