// cohort-operator: runs CoordinatedJobs. Watches them (and the pods, services and config
// maps it makes for them), starts a coordinator and the workers with the sidecar, restarts
// the gang on failure and reports status. One replica leads (a Lease); others stand by.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/command_line.h"
#include "common/crash_report.h"
#include "common/http_server.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/process.h"
#include "common/yaml_config.h"
#include "operator/controller/job_controller.h"
#include "operator/kube/kube_client.h"
#include "operator/kube/leader_election.h"
#include "spdlog/spdlog.h"

namespace {

const char* const kVersion = cohort::Version();

int Fail(const std::string& message) {
  std::fprintf(stderr, "cohort-operator: %s\n", message.c_str());
  return 2;
}

// "key=value,key=value" -> labels; false (with `error` set) on anything else.
bool ParseLabels(const std::string& text, std::map<std::string, std::string>* out,
                 std::string* error) {
  for (absl::string_view pair : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
    kv.first = std::string(absl::StripAsciiWhitespace(kv.first));
    kv.second = std::string(absl::StripAsciiWhitespace(kv.second));
    if (kv.first.empty() || pair.find('=') == absl::string_view::npos) {
      *error = absl::StrCat("\"", pair, "\" is not key=value");
      return false;
    }
    (*out)[kv.first] = kv.second;
  }
  return true;
}

// The command line, as given.
struct Flags {
  std::string kubeconfig, namespace_name, http_listen = "0.0.0.0:8080";
  bool leader_elect = true;
  std::string election_namespace = cohort::EnvOr("POD_NAMESPACE", "default");
  std::string election_id = "cohort-operator";
  std::string lease_duration = "15s", renew_deadline = "10s", retry_period = "2s";
  cohort::controller::OperatorSettings settings;
  std::string failure_settle = "1s", coordinator_poll = "500ms";
  int workers = 4;
  std::string operator_namespace = cohort::EnvOr("POD_NAMESPACE");
  std::string operator_pod_labels =
      "app.kubernetes.io/part-of=cohort,app.kubernetes.io/component=operator";
  std::string metrics_namespace;
  bool metrics_namespace_given = false;
  std::string kueue = "auto";
  std::string log_format = "text", log_level = "info";
};

// The Kubernetes side: the API server, the namespace watched, leader election, HTTP, logs.
void AddClusterFlags(CLI::App& app, Flags& f) {
  app.add_option("--kubeconfig", f.kubeconfig, "kubeconfig file (default: see above)");
  app.add_option("--namespace", f.namespace_name,
                 "watch CoordinatedJobs in this namespace only (default: all)");
  app.add_option("--http-listen", f.http_listen, "address of /metrics /healthz /readyz")
      ->capture_default_str();
  app.add_option("--leader-elect", f.leader_elect,
                 "elect one active replica through a Lease (true or false)")
      ->capture_default_str();
  app.add_option("--leader-election-namespace", f.election_namespace,
                 "namespace of the Lease ($POD_NAMESPACE)")
      ->capture_default_str();
  app.add_option("--leader-election-id", f.election_id, "name of the Lease")->capture_default_str();
  app.add_option("--lease-duration", f.lease_duration,
                 "how long a standby waits for a silent leader before taking over")
      ->capture_default_str();
  app.add_option("--renew-deadline", f.renew_deadline,
                 "how long the leader keeps trying to renew before it gives up and exits")
      ->capture_default_str();
  app.add_option("--retry-period", f.retry_period, "how often the lease is renewed or tried")
      ->capture_default_str();
  app.add_option("--coordinator-poll", f.coordinator_poll,
                 "how often each running job's coordinator is asked for its cluster snapshot")
      ->capture_default_str();
  app.add_option("--workers", f.workers, "jobs reconciled in parallel")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--log-format", f.log_format, "text or json")->capture_default_str();
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn or error")
      ->capture_default_str();
}

// What the operator makes for each job.
void AddJobFlags(CLI::App& app, Flags& f) {
  app.add_option("--coordinator-image", f.settings.coordinator_image,
                 "coordinator image for jobs that name none")
      ->capture_default_str();
  app.add_option("--sidecar-image", f.settings.sidecar_image,
                 "sidecar image for jobs that name none")
      ->capture_default_str();
  app.add_option("--workload-liveness", f.settings.workload_liveness,
                 "how sidecars notice the workload exiting: process (pods share a process "
                 "namespace), file, http or none")
      ->capture_default_str()
      ->check(CLI::IsMember({"process", "file", "http", "none"}));
  app.add_option("--failure-settle", f.failure_settle,
                 "after a failure, how long to wait for the rest of the gang to exit before "
                 "choosing between a restart and failing the job")
      ->capture_default_str();
  app.add_option("--network-policy", f.settings.network_policy,
                 "give every job a NetworkPolicy that lets only its own pods, the operator's "
                 "pods (the coordinator's gRPC port) and --metrics-namespace (the metrics "
                 "ports) reach its pods (true or false; false deletes those made before)")
      ->capture_default_str();
  app.add_option("--job-tls", f.settings.job_tls,
                 "operator: give every new job certificates of its own (a CA, the "
                 "coordinator's, the sidecars') in its Secret, and run its coordinator with "
                 "mutual TLS; cert-manager: the same with two cert-manager Certificates per "
                 "job from --job-tls-issuer (renewed by cert-manager, read again by the "
                 "programs); none: plain gRPC, guarded by the job's token. A job keeps what "
                 "its Secret was made with")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "operator", "cert-manager"}));
  app.add_option("--sidecar-gpu-access", f.settings.sidecar_gpu_access,
                 "how a worker pod's sidecar sees the pod's GPUs with the NVIDIA device plugin: "
                 "none (it sees none and says so in its log and cohort_sidecar_gpus_missing) or "
                 "visible-devices (NVIDIA_VISIBLE_DEVICES=all and the kubelet's PodResources "
                 "socket, a hostPath, as root: it watches the GPUs the kubelet gave its pod; the "
                 "namespace must allow privileged pods). DRA claims are always shared")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "visible-devices"}));
  app.add_option("--job-tls-issuer", f.settings.job_tls_issuer,
                 "with --job-tls=cert-manager: the issuer of every job's certificates, "
                 "ClusterIssuer/<name> or Issuer/<name> (in the job's namespace). It must "
                 "fill ca.crt (a CA or Vault issuer, not ACME)");
  app.add_option("--operator-namespace", f.operator_namespace,
                 "the namespace of the operator's pods, which the NetworkPolicy lets reach "
                 "each coordinator's gRPC port ($POD_NAMESPACE; empty: no operator pod)")
      ->capture_default_str();
  app.add_option("--operator-pod-labels", f.operator_pod_labels,
                 "the labels of the operator's pods, key=value,... (empty: every pod of "
                 "--operator-namespace)")
      ->capture_default_str();
  app.add_option_function<std::string>(
      "--metrics-namespace",
      [&](const std::string& v) {
        f.metrics_namespace = v;
        f.metrics_namespace_given = true;
      },
      "the namespace whose pods (Prometheus) the NetworkPolicy lets reach the coordinators' "
      "HTTP port and the sidecars' (default: --operator-namespace; empty: none)");
  app.add_option("--kueue", f.kueue,
                 "Kueue: jobs labelled kueue.x-k8s.io/queue-name wait for their Workload's "
                 "admission. on (Kueue's API must be served), off (the label is ignored) or "
                 "auto (on when the API server serves kueue.x-k8s.io/v1beta2 Workloads)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "on", "off"}));
}

// The durations and settings the flags give; an error names the flag.
struct Durations {
  absl::Duration lease, renew, retry, settle, poll;
};
absl::StatusOr<Durations> Resolve(Flags& f) {
  cohort::controller::OperatorSettings& settings = f.settings;
  if (settings.job_tls == "cert-manager") {
    const auto slash = settings.job_tls_issuer.find('/');
    const std::string kind = settings.job_tls_issuer.substr(0, slash);
    if (slash == std::string::npos || (kind != "ClusterIssuer" && kind != "Issuer") ||
        slash + 1 == settings.job_tls_issuer.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--job-tls=cert-manager needs --job-tls-issuer "
                       "ClusterIssuer/<name> or Issuer/<name>, not \"",
                       settings.job_tls_issuer, "\""));
    }
  } else if (!settings.job_tls_issuer.empty()) {
    return absl::InvalidArgumentError("--job-tls-issuer is for --job-tls=cert-manager");
  }
  Durations d;
  for (auto [text, out, flag] : {std::tuple{&f.lease_duration, &d.lease, "--lease-duration"},
                                 std::tuple{&f.renew_deadline, &d.renew, "--renew-deadline"},
                                 std::tuple{&f.retry_period, &d.retry, "--retry-period"},
                                 std::tuple{&f.failure_settle, &d.settle, "--failure-settle"},
                                 std::tuple{&f.coordinator_poll, &d.poll, "--coordinator-poll"}}) {
    auto parsed = cohort::ParseDurationFlag(flag, *text);
    if (!parsed.ok()) return parsed.status();
    *out = *parsed;
  }
  if (f.leader_elect && !(d.retry < d.renew && d.renew < d.lease)) {
    return absl::InvalidArgumentError(
        "leader election needs --retry-period < --renew-deadline < --lease-duration");
  }
  if (d.poll < absl::Milliseconds(10)) {
    return absl::InvalidArgumentError("--coordinator-poll must be at least 10ms");
  }
  settings.failure_settle = d.settle;
  settings.operator_namespace = f.operator_namespace;
  settings.metrics_namespace =
      f.metrics_namespace_given ? f.metrics_namespace : f.operator_namespace;
  if (std::string error;
      !ParseLabels(f.operator_pod_labels, &settings.operator_pod_labels, &error)) {
    return absl::InvalidArgumentError(absl::StrCat("--operator-pod-labels: ", error));
  }
  return d;
}

// What every job gets, said once at start.
void LogJobSettings(const Flags& f) {
  const cohort::controller::OperatorSettings& settings = f.settings;
  if (settings.network_policy) {
    spdlog::info(
        "job NetworkPolicies: the coordinator's gRPC port open to {}, the metrics ports to {}",
        settings.operator_namespace.empty()
            ? "the job's pods only (no --operator-namespace: this operator's own polls come "
              "from outside the cluster's pods)"
            : absl::StrCat("the job's pods and pods ", f.operator_pod_labels, " in namespace ",
                           settings.operator_namespace),
        settings.metrics_namespace.empty() ? "no namespace (--metrics-namespace is empty)"
                                           : "namespace " + settings.metrics_namespace);
  } else {
    spdlog::info("job NetworkPolicies: off (--network-policy=false)");
  }

  spdlog::info("job TLS: {}",
               settings.job_tls == "operator"
                   ? "mutual TLS with certificates this operator issues per job"
               : settings.job_tls == "cert-manager"
                   ? absl::StrCat("mutual TLS with certificates cert-manager issues per job from ",
                                  settings.job_tls_issuer)
                   : "off (--job-tls=none): plain gRPC, guarded by each job's token");
}

// /metrics, /healthz, and /readyz (ready when leading with synced caches, or standing by).
absl::Status ServeHttp(cohort::HttpServer& http, const std::string& listen,
                       cohort::MetricsRegistry& metrics,
                       const cohort::controller::JobController& controller,
                       const std::atomic<bool>& standby) {
  http.Handle("/metrics", [&](const cohort::HttpRequest&) {
    return cohort::HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", metrics.Render()};
  });
  http.Handle("/healthz", [](const cohort::HttpRequest&) {
    return cohort::HttpResponse{200, "text/plain", "ok\n"};
  });
  http.Handle("/readyz", [&](const cohort::HttpRequest&) {
    if (controller.synced()) return cohort::HttpResponse{200, "text/plain", "ready: leading\n"};
    if (standby) return cohort::HttpResponse{200, "text/plain", "ready: standing by\n"};
    return cohort::HttpResponse{503, "text/plain", "not ready: caches are syncing\n"};
  });
  if (listen.empty()) return absl::OkStatus();
  if (auto s = http.Start(listen); !s.ok()) return s;
  spdlog::info("serving /metrics /healthz /readyz on {}", listen);
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  cohort::InstallCrashReport(argv[0]);
  cohort::DisableMutexDeadlockDetection();
  CLI::App app{
      "cohort-operator: runs CoordinatedJobs (cohort.dev/v1alpha1) on Kubernetes. For each job\n"
      "it creates a coordinator pod and service and the worker pods with cohort-sidecar\n"
      "injected, restarts the whole gang when a worker or the coordinator fails (up to\n"
      "failurePolicy.maxRestarts), and writes the job's status. Serves /metrics, /healthz\n"
      "and /readyz. With --leader-elect, one replica works and the others stand by.\n\n"
      "Kubernetes access: --kubeconfig, else $KUBECONFIG, else the pod's service account,\n"
      "else ~/.kube/config.",
      "cohort-operator"};
  app.get_formatter()->column_width(44);
  cohort::AddYamlConfigOption(app);
  Flags f;
  AddClusterFlags(app, f);
  AddJobFlags(app, f);
  cohort::AddVersionFlag(app);
  if (auto exit_code = cohort::ParseCommandLine(app, argc, argv)) return *exit_code;
  if (auto s = cohort::SetUpLogging("operator", f.log_format, f.log_level); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  auto durations = Resolve(f);
  if (!durations.ok()) return Fail(std::string(durations.status().message()));
  const Durations& d = *durations;

  // Signals are taken by one thread; everything else checks `stop`. Blocked before any
  // thread starts (cpprestsdk starts its pool with the first client), so all inherit it.
  const cohort::StopSignals signals;

  auto config = cohort::kube::ResolveKubeConfig(f.kubeconfig);
  if (!config.ok()) return Fail(std::string(config.status().message()));
  cohort::kube::KubeClient client(*config);
  spdlog::info("cohort-operator {}: API server {} ({}), {}", kVersion, config->server,
               config->source,
               f.namespace_name.empty() ? "all namespaces" : "namespace " + f.namespace_name);
  LogJobSettings(f);

  cohort::MetricsRegistry metrics;
  metrics
      .AddGauge("cohort_operator_build_info", "cohort-operator's version (value 1).", {"version"})
      .WithLabels({kVersion})
      .Set(1);
  auto& leader_gauge = metrics
                           .AddGauge("cohort_operator_leader",
                                     "1 while this replica holds the leader lease, else 0.", {})
                           .WithLabels({});
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  const std::string identity = absl::StrCat(cohort::EnvOr("POD_NAME", host), "_", getpid());

  cohort::controller::JobController::Options options;
  options.namespace_name = f.namespace_name;
  options.workers = f.workers;
  options.settings = f.settings;
  options.coordinator_poll = d.poll;
  options.identity = identity;
  options.kueue = f.kueue;
  cohort::controller::JobController controller(&client, &metrics, options);

  std::atomic<bool> stop{false};
  std::atomic<bool> standby{f.leader_elect};
  cohort::HttpServer http;
  if (auto s = ServeHttp(http, f.http_listen, metrics, controller, standby); !s.ok()) {
    return Fail(std::string(s.message()));
  }

  std::thread signal_thread([&] {
    const int sig = signals.Wait();
    if (!stop) spdlog::info("received {}: stopping", cohort::StopSignals::Name(sig));
    stop = true;
    controller.StopWorkers();
  });

  cohort::kube::LeaderElector elector(
      &client, {f.election_namespace, f.election_id, identity, d.lease, d.renew, d.retry});
  std::thread holder;
  if (f.leader_elect) {
    spdlog::info("leader election: candidate {} for lease {}/{}", identity, f.election_namespace,
                 f.election_id);
    if (elector.Acquire(stop)) {
      standby = false;
      leader_gauge.Set(1);
      holder = std::thread([&] {
        elector.HoldUntilLost(stop);
        if (!stop) {
          // Another replica may act now; this one must not. Exit and be restarted.
          leader_gauge.Set(0);
          spdlog::error("leadership lost: exiting so that only the new leader acts");
          std::_Exit(1);
        }
      });
    }
  } else {
    leader_gauge.Set(1);
  }
  int exit_code = 0;
  if (!stop) {
    if (absl::Status s = controller.StartAndSync(stop); s.ok()) {
      controller.Run();
    } else if (!absl::IsCancelled(s)) {
      spdlog::error("{}", std::string(s.message()));
      exit_code = 1;
    }
  }

  stop = true;
  if (holder.joinable()) holder.join();
  if (f.leader_elect) elector.Release();  // a standby takes over at once
  client.Shutdown();                      // ends the watches in progress
  controller.Stop();
  kill(getpid(), SIGTERM);  // wakes the signal thread if it still waits
  signal_thread.join();
  http.Stop();
  spdlog::info("stopped");
  return exit_code;
}
