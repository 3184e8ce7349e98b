// SidecarRegistration: the agent registered, the topology exchanged and handed off, the agent
// shut down at the end.
#include "sidecar/sidecar_registration.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "agent/grpc_status.h"
#include "common/logging.h"
#include "spdlog/spdlog.h"

namespace cohort {
namespace {

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

}  // namespace

SidecarRegistration::SidecarRegistration(Options options, TaskIdentity task,
                                         CoordinationAgent* agent, const CoordinatorProxy* proxy,
                                         MetricsRegistry* registry,
                                         std::function<void()> on_connected)
    : options_(std::move(options)),
      task_(std::move(task)),
      agent_(agent),
      proxy_(proxy),
      registry_(registry),
      on_connected_(std::move(on_connected)) {}

SidecarRegistration::~SidecarRegistration() { Stop(); }

void SidecarRegistration::Start(gpu::GpuInventory gpus) {
  gpus_ = std::move(gpus);
  thread_ = std::thread([this] { Run(); });
}

void SidecarRegistration::ReadyWithoutRegistering() {
  absl::MutexLock lock(&mu_);
  ready_ = true;
}

void SidecarRegistration::BeginStop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  ready_ = false;
}

void SidecarRegistration::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    stopping_ = true;
    ready_ = false;
  }
  // The registration's thread may sit in a blocking call to the coordinator.
  agent_->CancelPendingCalls();
  if (thread_.joinable()) thread_.join();
  if (agent_->state() == AgentState::kConnected) {
    if (proxy_->CoordinatorUnreachable()) {
      // The proxy would hold the call until the coordinator is back (up to
      // --outage-tolerance), past the pod's grace period: it learns of the end from the
      // missing heartbeats instead.
      spdlog::warn("shutdown: the coordinator cannot be reached: not telling it of the stop");
    } else if (auto s = agent_->Shutdown(); !s.ok()) {
      // The sidecar job is auxiliary: no shutdown barrier waits for it.
      spdlog::warn("shutdown: {}", DescribeStatus(s));
    }
  }
  // Whatever happened above (no shutdown, or one that failed, or an agent in ERROR), the
  // agent's heartbeats end here: they call back into this object, which may go before it.
  agent_->Abandon();
}

bool SidecarRegistration::ready() const {
  absl::MutexLock lock(&mu_);
  return ready_;
}

std::optional<ClusterView> SidecarRegistration::cluster() const {
  absl::MutexLock lock(&mu_);
  return view_;
}

bool SidecarRegistration::SleepUnlessStopped(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), d);
  return stopping_;
}

void SidecarRegistration::Run() {
  const CoordinatorAccess coordinator = proxy_->PodAccess();
  AgentConfig config;
  config.coordinator_address = coordinator.address;
  config.auth_token = coordinator.auth_token;
  config.credentials = coordinator.credentials;
  config.tls_server_name = coordinator.tls_server_name;
  config.job_name = options_.sidecar_job;
  config.task_id = task_.task_id;
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
  if (auto s = agent_->Initialize(config, on_error); !s.ok()) {
    spdlog::error("cannot start the agent: {}", DescribeStatus(s));
    return;
  }
  // A coordinator that comes up after this pod, or restarts, is waited for.
  while (!Connected()) {
    if (SleepUnlessStopped(absl::Seconds(2))) return;
    if (agent_->state() == AgentState::kError) (void)agent_->Reset();
  }
  on_connected_();

  if (auto s = ExchangeTopology(); !s.ok()) {
    spdlog::error("topology exchange failed: {}", DescribeStatus(s));
    return;
  }
}

bool SidecarRegistration::Connected() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return true;  // nothing more to do
  }
  absl::Status s = agent_->Connect();
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
                    options_.sidecar_job, "=", task_.num_tasks);
  }
  if (why != last_connect_error_) {
    spdlog::warn("cannot register {} with {} (retrying every 2s): {}", task_.Describe(),
                 proxy_->coordinator_address(), why);
    last_connect_error_ = why;
  } else {
    spdlog::debug("cannot register {} with {}: {}", task_.Describe(), proxy_->coordinator_address(),
                  why);
  }
  return false;
}

absl::Status SidecarRegistration::ExchangeTopology() {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  v1::TaskTopology local = LocalTopology(gpus_, task_.task_id, host, task_.pod_ip, task_.pod.pod);
  if (auto s = agent_->WaitForAllTasks(PackTopology(local)); !s.ok()) return s;
  auto tasks = UnpackTopology(agent_->GetClusterDeviceInfo());
  if (!tasks.ok()) return tasks.status();
  ClusterView view;
  view.job = task_.workload_job;
  view.rank = task_.task_id;
  view.world_size = task_.num_tasks;
  view.coordinator_address = proxy_->PodAccess().address;
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
  ready_ = agent_->state() == AgentState::kConnected;
  return absl::OkStatus();
}

// ---- Metrics --------------------------------------------------------------------------

void SidecarRegistration::RegisterMetrics() {
  heartbeat_rtt_ = &registry_
                        ->AddHistogram("cohort_sidecar_heartbeat_rtt_seconds",
                                       "Round trip of the sidecar's heartbeats to the coordinator.",
                                       {}, ExponentialBuckets(0.0005, 2, 14))
                        .WithLabels({});
  heartbeats_ = &registry_->AddCounter("cohort_sidecar_heartbeats_total",
                                       "Heartbeats sent, by result (ok, failed).", {"result"});
  registry_->AddCollector([this] { return CollectMetrics(); });
}

std::vector<CollectedFamily> SidecarRegistration::CollectMetrics() const {
  CollectedFamily state{"cohort_sidecar_agent_state",
                        "1 for the agent's current state (UNINITIALIZED, DISCONNECTED, "
                        "CONNECTED, ERROR).",
                        "gauge",
                        {}};
  AgentState current = agent_->state();
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
  absl::MutexLock lock(&mu_);
  ready.samples.push_back({{}, ready_ ? 1.0 : 0.0});
  if (cluster_complete_at_ != absl::InfinitePast()) {
    since.samples.push_back({{}, absl::ToDoubleSeconds(absl::Now() - cluster_complete_at_)});
  }
  return {state, ready, since};
}

}  // namespace cohort
