#include "sidecar/sidecar.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "agent/grpc_status.h"
#include "common/logging.h"
#include "sidecar/pod_gpus.h"
#include "spdlog/spdlog.h"

namespace cohort {
namespace {

// The sidecar's own container in the pod the operator makes (its devices are not the pod's
// workload's).
constexpr char kSidecarContainerName[] = "cohort-sidecar";
constexpr char kIncarnationFile[] = "sidecar-incarnation";

// Readers of the hand-off directory never see a half-written file.
absl::Status WriteFileAtomically(const std::string& dir, const std::string& name,
                                 const std::string& content) {
  std::string path = absl::StrCat(dir, "/", name);
  std::string temp = absl::StrCat(path, ".tmp");
  {
    std::ofstream out(temp, std::ios::trunc);
    out << content;
    if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", temp));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", temp, " to ", path));
  }
  return absl::OkStatus();
}

// The sidecar's incarnation for the life of its pod. The hand-off directory is the pod's
// emptyDir, which outlives a restart of the sidecar's container: a sidecar that crashed and
// was started again registers as the incarnation it had, so the coordinator sees the same
// task come back rather than a task that restarted, which would stop the job. Without a
// hand-off directory: 0, a new incarnation at every start.
uint64_t PodIncarnation(const std::string& handoff_dir) {
  if (handoff_dir.empty()) return 0;
  std::string path = absl::StrCat(handoff_dir, "/", kIncarnationFile);
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t incarnation = 0;
  if (in && absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &incarnation) && incarnation != 0) {
    spdlog::info("registering as incarnation {}, this pod's sidecar's before it restarted ({})",
                 incarnation, path);
    return incarnation;
  }
  if (!text.empty()) spdlog::warn("{} holds no incarnation; starting a new one", path);
  absl::BitGen gen;
  incarnation = absl::Uniform<uint64_t>(gen, 1, std::numeric_limits<uint64_t>::max());
  if (auto s = WriteFileAtomically(handoff_dir, kIncarnationFile, absl::StrCat(incarnation, "\n"));
      !s.ok()) {
    spdlog::warn(
        "cannot keep the incarnation for a restart of this sidecar: {}; a restart will "
        "register as a new incarnation, which stops the job unless the sidecar job is "
        "recoverable",
        std::string(s.message()));
  }
  return incarnation;
}

const char* ProblemReason(gpu::HealthProblem problem) {
  switch (problem) {
    case gpu::HealthProblem::kCriticalXid:
      return "xid";
    case gpu::HealthProblem::kDoubleBitEcc:
      return "double_bit_ecc";
    case gpu::HealthProblem::kGpuLost:
      return "gpu_lost";
  }
  return "gpu";
}

}  // namespace

Sidecar::Sidecar(SidecarOptions options, MetricsRegistry* registry)
    : options_(std::move(options)), registry_(registry) {}

Sidecar::~Sidecar() { Stop(); }

std::string Sidecar::TaskString() const {
  // By hand (no POD_NAME) there is no pod to name.
  return absl::StrCat(
      "/job:", options_.workload_job, "/task:", options_.task_id,
      options_.pod.pod.empty() ? "" : absl::StrCat(" (pod ", options_.pod.pod, ")"));
}

int Sidecar::http_port() const { return http_.port(); }

std::string Sidecar::CoordinatorEndpoint() const {
  if (!proxy_) return options_.coordinator_address;
  // A wildcard listen address is reached on loopback from inside the pod.
  std::string host = options_.proxy_listen.substr(0, options_.proxy_listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]") host = "127.0.0.1";
  return absl::StrCat(host, ":", proxy_->port());
}

absl::Status Sidecar::Start() {
  if (!options_.proxy_listen.empty()) {
    ProxyOptions proxy;
    proxy.listen = options_.proxy_listen;
    proxy.torch_store_listen = options_.torch_store_proxy_listen;
    if (!proxy.torch_store_listen.empty()) {
      torch_store_metrics_ =
          std::make_unique<torch::TorchStoreMetrics>(*registry_, "cohort_sidecar", /*held=*/true);
      proxy.torch_store_metrics = torch_store_metrics_.get();
    }
    proxy.upstream.address = options_.coordinator_address;
    proxy.upstream.outage_tolerance = options_.outage_tolerance;
    proxy.upstream.auth_token = options_.auth_token;
    proxy.upstream.credentials = options_.coordinator_credentials;
    proxy.upstream.tls_server_name = options_.tls_server_name;
    proxy_ = std::make_unique<ProxyServer>(proxy);
    if (auto s = proxy_->Start(); !s.ok()) {
      proxy_.reset();
      return absl::Status(s.code(), absl::StrCat("--proxy-listen: ", s.message()));
    }
  }
  if (options_.objstore) {
    runtime::ObjectStoreOptions store = *options_.objstore;
    store.scheduler = CoordinatorEndpoint();
    // Through the proxy the sidecar's credentials go upstream. Every call to this store must
    // carry the job's token, checked before its message is read: the scheduler's and the
    // other stores' do, and so do the pod's workers and driver, whose containers the operator
    // gives the token (COHORT_AUTH_TOKEN_FILE).
    store.auth_token = options_.auth_token;
    objstore_ = std::make_unique<runtime::ObjectStoreServer>(store);
    if (auto s = objstore_->Start(); !s.ok()) {
      objstore_.reset();
      return absl::Status(s.code(), absl::StrCat("the object store (--objstore-listen ",
                                                 store.listen, "): ", s.message()));
    }
  }
  gpu::GpuMonitorOptions gpu_options = options_.gpu;
  gpu_options.on_health_event = [this](const gpu::HealthEvent& event) { OnGpuProblem(event); };
  gpu_options.on_event = [this](const gpu::GpuEvent& event) {
    if (gpu_metrics_) gpu_metrics_->OnEvent(event);
  };
  gpu_options.log = [](const std::string& line) { spdlog::info("gpu: {}", line); };
  std::string how_found;
  ChoosePodGpus(&gpu_options, &how_found);
  gpus_ = std::make_unique<gpu::GpuMonitor>(gpu_options);
  const int visible = static_cast<int>(gpus_->inventory().gpus.size());
  spdlog::info("{} GPUs for this pod{}", visible,
               gpus_->inventory().gpus.empty()
                   ? ""
                   : absl::StrCat(", driver ", gpus_->inventory().driver.driver_version));
  gpus_expected_ = options_.expected_gpus;
  gpus_missing_ = gpus_expected_ > visible ? gpus_expected_ - visible : 0;
  if (const std::string problem =
          GpuVisibilityProblem(gpus_expected_, visible, gpus_->inventory().diagnostic, how_found);
      !problem.empty()) {
    spdlog::error("{}", problem);
  }
  gpu_metrics_ = std::make_unique<GpuMetrics>(
      options_.pod, gpus_->inventory(), options_.dcgm_metrics, [this] { return gpus_->Health(); });
  gpu_metrics_->Register(*registry_);
  RegisterMetrics();

  workload_ = std::make_unique<WorkloadWatch>(
      options_.workload, [this](const std::string& what) { OnWorkloadExit(what); });

  http_.Handle("/metrics", [this](const HttpRequest&) {
    return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", registry_->Render()};
  });
  http_.Handle("/healthz", [](const HttpRequest&) {
    return HttpResponse{200, "text/plain", "ok\n"};
  });
  http_.Handle("/readyz", [this](const HttpRequest&) {
    absl::MutexLock lock(&mu_);
    if (ready_) return HttpResponse{200, "text/plain", "ready\n"};
    return HttpResponse{503, "text/plain",
                        "not ready: waiting for the coordinator and every "
                        "sidecar of the job\n"};
  });
  // The hand-off (rank, peers, addresses, GPUs) is the pod's own business: the port is open to
  // the metrics namespace and, where NetworkPolicy is not enforced, to every pod.
  http_.Handle("/v1/cluster", [this](const HttpRequest& request) {
    if (!request.from_loopback) {
      return HttpResponse{403, "text/plain",
                          "GET /v1/cluster is served to the pod's own processes only: call it "
                          "on 127.0.0.1\n"};
    }
    return ClusterResponse();
  });
  http_.Handle("/v1/alive", [this](const HttpRequest& request) {
    if (request.method != "POST" && request.method != "PUT") {
      return HttpResponse{405, "text/plain", "POST /v1/alive\n"};
    }
    // Only the pod's own processes may say the workload lives: anyone else who reaches
    // the port could keep a dead workload "alive".
    if (!request.from_loopback) {
      return HttpResponse{403, "text/plain",
                          "POST /v1/alive is served to the pod's own processes only: call it "
                          "on 127.0.0.1\n"};
    }
    workload_->Ping();
    return HttpResponse{204, "text/plain", ""};
  });
  if (auto s = http_.Start(options_.http_listen); !s.ok()) {
    if (absl::StrContains(s.message(), "Address already in use")) {
      // Two sidecars by hand on one machine both take the default port.
      return absl::Status(s.code(), absl::StrCat(s.message(),
                                                 " (another sidecar on this host? give each "
                                                 "its own --http-listen, e.g. 127.0.0.1:9478)"));
    }
    return s;
  }
  spdlog::info("sidecar of {} serving /metrics /healthz /readyz /v1/cluster on {} (port {})",
               TaskString(), options_.http_listen, http_.port());

  gpus_->StartEventThread();
  sample_thread_ = std::thread([this] { SampleLoop(); });
  if (options_.task_runtime) {
    // Task workers come and go; the scheduler runs their tasks again elsewhere.
    spdlog::info(
        "task runtime pod: object store {} registered; no agent, the workload's exit "
        "is reported to nobody",
        objstore_address());
    absl::MutexLock lock(&mu_);
    ready_ = true;
    return absl::OkStatus();
  }
  workload_->Start();
  lifecycle_thread_ = std::thread([this] { Lifecycle(); });
  return absl::OkStatus();
}

void Sidecar::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    ready_ = false;
  }
  if (workload_) workload_->Stop();
  if (gpus_) gpus_->StopEventThread();
  if (sample_thread_.joinable()) sample_thread_.join();
  // The lifecycle thread may sit in a blocking call to the coordinator.
  agent_.CancelPendingCalls();
  if (lifecycle_thread_.joinable()) lifecycle_thread_.join();
  if (agent_.state() == AgentState::kConnected) {
    if (proxy_ && proxy_->backend().link() != UpstreamBackend::Link::kConnected) {
      // The proxy would hold the call until the coordinator is back (up to
      // --outage-tolerance), past the pod's grace period: it learns of the end from the
      // missing heartbeats instead.
      spdlog::warn("shutdown: the coordinator cannot be reached: not telling it of the stop");
    } else if (auto s = agent_.Shutdown(); !s.ok()) {
      // The sidecar job is auxiliary: no shutdown barrier waits for it.
      spdlog::warn("shutdown: {}", DescribeStatus(s));
    }
  }
  http_.Stop();
  if (objstore_) {
    objstore_->Shutdown();
    objstore_->Wait();
  }
  if (proxy_) proxy_->Shutdown(absl::UnavailableError("the sidecar is stopping"));
  spdlog::info("sidecar of {} stopped", TaskString());
}

bool Sidecar::SleepUnlessStopped(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopped_), d);
  return stopped_;
}

void Sidecar::SampleLoop() {
  do {
    gpu_metrics_->OnSample(gpus_->Sample());
  } while (!SleepUnlessStopped(options_.sample_interval));
}

// ---- The coordinator ------------------------------------------------------------------

void Sidecar::Lifecycle() {
  AgentConfig config;
  config.coordinator_address = CoordinatorEndpoint();
  config.auth_token = options_.auth_token;
  if (!proxy_) {
    config.credentials = options_.coordinator_credentials;
    config.tls_server_name = options_.tls_server_name;
  }
  config.job_name = options_.sidecar_job;
  config.task_id = options_.task_id;
  config.incarnation = PodIncarnation(options_.handoff_dir);
  config.heartbeat_interval = options_.heartbeat_interval;
  config.unreachable_timeout = options_.unreachable_timeout;
  config.register_timeout = options_.register_timeout;
  config.on_heartbeat = [this](absl::Duration rtt, const absl::Status& status) {
    heartbeats_->WithLabels({status.ok() ? "ok" : "failed"}).Increment();
    if (status.ok()) heartbeat_rtt_->Observe(absl::ToDoubleSeconds(rtt));
  };
  auto on_error = [this](const absl::Status& error) {
    spdlog::warn("the job is failing: {}", DescribeStatus(error));
    absl::MutexLock lock(&mu_);
    ready_ = false;
  };
  if (auto s = agent_.Initialize(config, on_error); !s.ok()) {
    spdlog::error("cannot start the agent: {}", DescribeStatus(s));
    return;
  }
  // A coordinator that comes up after this pod, or restarts, is waited for.
  while (!Connected()) {
    if (SleepUnlessStopped(absl::Seconds(2))) return;
    if (agent_.state() == AgentState::kError) (void)agent_.Reset();
  }
  std::optional<std::pair<std::string, absl::Status>> pending;
  {
    absl::MutexLock lock(&mu_);
    pending.swap(pending_report_);
  }
  if (pending) Report(pending->first, pending->second);

  if (auto s = ExchangeTopology(); !s.ok()) {
    spdlog::error("topology exchange failed: {}", DescribeStatus(s));
    return;
  }
}

bool Sidecar::Connected() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return true;  // nothing more to do
  }
  absl::Status s = agent_.Connect();
  if (s.ok()) {
    last_connect_error_.clear();
    return true;
  }
  // Said once, and again when it changes; the retries every 2 s in between are debug lines.
  std::string why = DescribeStatus(s);
  if (absl::IsInvalidArgument(s) && absl::StrContains(s.message(), options_.sidecar_job)) {
    absl::StrAppend(&why,
                    "; the coordinator must declare the sidecars' job: run it with "
                    "--auxiliary-job ",
                    options_.sidecar_job, "=", options_.num_tasks);
  }
  if (why != last_connect_error_) {
    spdlog::warn("cannot register {} with {} (retrying every 2s): {}", TaskString(),
                 options_.coordinator_address, why);
    last_connect_error_ = why;
  } else {
    spdlog::debug("cannot register {} with {}: {}", TaskString(), options_.coordinator_address,
                  why);
  }
  return false;
}

absl::Status Sidecar::ExchangeTopology() {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  v1::TaskTopology local =
      LocalTopology(gpus_->inventory(), options_.task_id, host, options_.pod_ip, options_.pod.pod);
  if (auto s = agent_.WaitForAllTasks(PackTopology(local)); !s.ok()) return s;
  auto tasks = UnpackTopology(agent_.GetClusterDeviceInfo());
  if (!tasks.ok()) return tasks.status();
  ClusterView view;
  view.job = options_.workload_job;
  view.rank = options_.task_id;
  view.world_size = options_.num_tasks;
  view.coordinator_address = CoordinatorEndpoint();
  view.tasks = std::move(*tasks);
  if (!options_.handoff_dir.empty()) {
    for (const auto& [name, content] : {std::pair{"cluster.json", ClusterJson(view)},
                                        std::pair{"cluster.env", ClusterEnv(view)}}) {
      if (auto s = WriteFileAtomically(options_.handoff_dir, name, content); !s.ok()) return s;
    }
  }
  spdlog::info("cluster complete: {}, {}; rank {} handed to the workload{}",
               Plural(static_cast<long long>(view.tasks.size()), "task"),
               Plural(static_cast<long long>(GlobalGpus(view).size()), "GPU"), view.rank,
               options_.handoff_dir.empty() ? "" : absl::StrCat(" in ", options_.handoff_dir));
  absl::MutexLock lock(&mu_);
  view_ = std::move(view);
  cluster_complete_at_ = absl::Now();
  ready_ = agent_.state() == AgentState::kConnected;
  return absl::OkStatus();
}

HttpResponse Sidecar::ClusterResponse() const {
  absl::MutexLock lock(&mu_);
  if (!view_) {
    return HttpResponse{503, "application/json",
                        "{\"error\": \"the cluster is not complete yet\"}\n"};
  }
  return HttpResponse{200, "application/json", ClusterJson(*view_)};
}

// ---- Failures -------------------------------------------------------------------------

void Sidecar::Report(const std::string& reason, const absl::Status& error) {
  {
    absl::MutexLock lock(&mu_);
    last_error_reason_ = reason;
    last_error_ = std::string(error.message());
    last_error_at_ = absl::Now();
    if (agent_.state() != AgentState::kConnected) {
      if (!pending_report_) pending_report_ = {reason, error};
      spdlog::error("{} (not connected yet: reported once connected)",
                    std::string(error.message()));
      return;
    }
  }
  spdlog::error("reporting to the coordinator: {}", std::string(error.message()));
  reported_->WithLabels({reason}).Increment();
  if (auto s = agent_.ReportError(error); !s.ok()) {
    spdlog::error("the report did not reach the coordinator: {}", DescribeStatus(s));
  }
}

void Sidecar::OnWorkloadExit(const std::string& what) {
  // A workload that shut down through the coordinator is done, not failed. Only one whose
  // task is still connected died on us.
  auto states = agent_.GetTaskState({{options_.workload_job, options_.task_id}});
  if (states.ok() && states->size() == 1 && (*states)[0].state != tensorflow::TASKSTATE_CONNECTED) {
    spdlog::info("{}; its task is {}, so this is not a failure", what,
                 tensorflow::CoordinatedTaskState_Name((*states)[0].state));
    return;
  }
  Report("workload_exit", absl::UnavailableError(absl::StrCat(TaskString(), " failed: ", what,
                                                              " without shutting down")));
}

void Sidecar::OnGpuProblem(const gpu::HealthEvent& event) {
  Report(ProblemReason(event.problem),
         absl::InternalError(absl::StrCat("GPU ", event.gpu_index, " (", event.gpu_uuid, ") of ",
                                          TaskString(), " is unhealthy: ", event.reason)));
}

void Sidecar::ChoosePodGpus(gpu::GpuMonitorOptions* options, std::string* how) const {
  if (!options_.gpu_uuids.empty()) {
    options->only_uuids = options_.gpu_uuids;
    *how = absl::StrCat(options_.gpu_uuids.size(), " named by --gpu-uuids");
    return;
  }
  if (options_.pod_resources_socket.empty()) return;
  auto ids = PodDeviceIds(options_.pod_resources_socket, options_.pod.namespace_name,
                          options_.pod.pod, kSidecarContainerName, options_.pod_gpu_resources);
  if (!ids.ok()) {
    // Watching the node's GPUs would blame this pod for its neighbours' faults: none then.
    options->only_uuids = std::vector<std::string>{};
    *how = std::string(ids.status().message());
    spdlog::error("cannot tell which GPUs are the pod's: {}; watching none", *how);
    return;
  }
  options->only_uuids = *ids;
  *how = absl::StrCat("the kubelet gave the pod ", ids->size());
  spdlog::info("the kubelet gave the pod's containers {} GPUs: {}", ids->size(),
               absl::StrJoin(*ids, ", "));
}

// ---- Metrics --------------------------------------------------------------------------

void Sidecar::RegisterMetrics() {
  heartbeat_rtt_ = &registry_
                        ->AddHistogram("cohort_sidecar_heartbeat_rtt_seconds",
                                       "Round trip of the sidecar's heartbeats to the coordinator.",
                                       {}, ExponentialBuckets(0.0005, 2, 14))
                        .WithLabels({});
  heartbeats_ = &registry_->AddCounter("cohort_sidecar_heartbeats_total",
                                       "Heartbeats sent, by result (ok, failed).", {"result"});
  reported_ = &registry_->AddCounter(
      "cohort_sidecar_errors_reported_total",
      "Errors this sidecar reported to the coordinator, by reason (xid, double_bit_ecc, "
      "gpu_lost, workload_exit).",
      {"reason"});
  registry_->AddCollector([this] { return CollectAgentMetrics(); });
  if (gpus_expected_ >= 0) {
    registry_
        ->AddGauge("cohort_sidecar_gpus_expected",
                   "GPUs the pod's workload asks for (its nvidia.com/gpu limits).", {})
        .WithLabels({})
        .Set(gpus_expected_);
  }
  registry_
      ->AddGauge("cohort_sidecar_gpus_missing",
                 "GPUs the pod's workload asks for that the sidecar cannot see: its GPU health "
                 "checks and metrics miss them (docs/sidecar.md, \"Seeing the pod's GPUs\").",
                 {})
      .WithLabels({})
      .Set(gpus_missing_);
}

std::vector<CollectedFamily> Sidecar::CollectAgentMetrics() const {
  CollectedFamily state{"cohort_sidecar_agent_state",
                        "1 for the agent's current state (UNINITIALIZED, DISCONNECTED, "
                        "CONNECTED, ERROR).",
                        "gauge",
                        {}};
  AgentState current = agent_.state();
  for (AgentState s : {AgentState::kUninitialized, AgentState::kDisconnected,
                       AgentState::kConnected, AgentState::kError}) {
    state.samples.push_back({{{"state", AgentStateName(s)}}, s == current ? 1.0 : 0.0});
  }
  CollectedFamily ready{"cohort_sidecar_ready",
                        "1 once registered and the cluster topology is complete.",
                        "gauge",
                        {}};
  CollectedFamily since{"cohort_sidecar_seconds_since_cluster_complete",
                        "Seconds since every sidecar of the job published its topology.",
                        "gauge",
                        {}};
  CollectedFamily last{"cohort_sidecar_last_error_timestamp_seconds",
                       "When this sidecar last found an error to report (Unix time).",
                       "gauge",
                       {}};
  CollectedFamily last_info{"cohort_sidecar_last_error_info",
                            "1, labelled with the reason and message of the last error found.",
                            "gauge",
                            {}};
  std::vector<CollectedFamily> proxy;
  if (proxy_) {
    UpstreamBackend& backend = proxy_->backend();
    CollectedFamily link{"cohort_sidecar_proxy_link_state",
                         "1 for the proxy's link to the coordinator: not yet connected, "
                         "connected, down (calls held), failed (past the outage tolerance).",
                         "gauge",
                         {}};
    UpstreamBackend::Link current_link = backend.link();
    for (UpstreamBackend::Link l :
         {UpstreamBackend::Link::kNotYetConnected, UpstreamBackend::Link::kConnected,
          UpstreamBackend::Link::kDown, UpstreamBackend::Link::kFailed,
          UpstreamBackend::Link::kStopped}) {
      link.samples.push_back(
          {{{"state", UpstreamBackend::LinkName(l)}}, l == current_link ? 1.0 : 0.0});
    }
    proxy.push_back(std::move(link));
    proxy.push_back({"cohort_sidecar_proxy_held_calls",
                     "Calls the proxy holds until the coordinator is back.",
                     "gauge",
                     {{{}, static_cast<double>(backend.held_calls())}}});
    proxy.push_back({"cohort_sidecar_proxy_parked_calls",
                     "Calls open on the proxy's park stream to the coordinator (the pod's "
                     "waiting registrations, error polls, blocking gets, barriers, shutdowns).",
                     "gauge",
                     {{{}, static_cast<double>(backend.parked_calls())}}});
    proxy.push_back({"cohort_sidecar_proxy_reissued_calls_total",
                     "Calls the proxy sent to the coordinator again after an outage.",
                     "counter",
                     {{{}, static_cast<double>(backend.reissued_calls())}}});
    proxy.push_back({"cohort_sidecar_proxy_outages_total",
                     "Times the proxy lost the coordinator after having reached it.",
                     "counter",
                     {{{}, static_cast<double>(backend.outages())}}});
  }
  absl::MutexLock lock(&mu_);
  ready.samples.push_back({{}, ready_ ? 1.0 : 0.0});
  if (cluster_complete_at_ != absl::InfinitePast()) {
    since.samples.push_back({{}, absl::ToDoubleSeconds(absl::Now() - cluster_complete_at_)});
  }
  if (last_error_at_ != absl::InfinitePast()) {
    last.samples.push_back({{}, absl::ToDoubleSeconds(last_error_at_ - absl::UnixEpoch())});
    last_info.samples.push_back(
        {{{"reason", last_error_reason_}, {"message", last_error_.substr(0, 200)}}, 1});
  }
  proxy.insert(proxy.begin(), {state, ready, since, last, last_info});
  return proxy;
}

}  // namespace cohort
