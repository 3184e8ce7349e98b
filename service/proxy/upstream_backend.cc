// UpstreamBackend: its channel, its construction, start and stop, what it tells of itself, and
// the link thread (probing the coordinator, re-establishing, giving up).
#include "service/proxy/upstream_backend.h"

#include <algorithm>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_auth.h"
#include "common/grpc_channel.h"
#include "service/proxy/upstream_forward.h"
#include "service/proxy/upstream_key_watch.h"
#include "spdlog/spdlog.h"

namespace cohort {

namespace tf = tensorflow;

std::shared_ptr<grpc::Channel> MakeUpstreamChannel(const UpstreamOptions& options) {
  grpc::ChannelArguments args;
  // jaxlib shares compiled executables through the store.
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  args.SetCompressionAlgorithm(GRPC_COMPRESS_GZIP);
  // Notice a coordinator that is gone, and find it again soon after it is back.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1'000);
  // A coordinator pod made again comes back at a new address under the same name: look the
  // name up again within a second, not gRPC's default of 30 s after the last lookup (the
  // coordinator came back in under a second and the proxy found it 24 s later).
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 1'000);
  if (!options.tls_server_name.empty()) args.SetSslTargetNameOverride(options.tls_server_name);
  auto credentials = options.credentials ? options.credentials : grpc::InsecureChannelCredentials();
  return CreateChannelWithToken(options.address, credentials, args, options.auth_token);
}

const char* UpstreamBackend::LinkName(Link link) {
  switch (link) {
    case Link::kNotYetConnected:
      return "not yet connected";
    case Link::kConnected:
      return "connected";
    case Link::kDown:
      return "down";
    case Link::kFailed:
      return "failed";
    case Link::kStopped:
      return "stopped";
  }
  return "unknown";
}

UpstreamBackend::UpstreamBackend(UpstreamOptions options)
    : options_(std::move(options)),
      channel_(MakeUpstreamChannel(options_)),
      stub_(tf::CoordinationService::NewStub(channel_)),
      cohort_stub_(v1::Coordinator::NewStub(channel_)),
      link_(options_.address, options_.outage_tolerance),
      session_(absl::StrFormat("%016x", absl::Uniform<uint64_t>(absl::BitGen()))) {}

UpstreamBackend::~UpstreamBackend() {
  Stop(absl::UnavailableError("the sidecar proxy is shutting down"));
  // Every call is over; what still holds one (a context holds the channel) goes now, and
  // the channel last, from this thread (common/grpc_channel.h says why).
  std::vector<std::shared_ptr<Forward>> forwards;
  std::vector<std::shared_ptr<UpstreamKeyWatch>> watches;
  std::shared_ptr<UpstreamPark> park;
  {
    absl::MutexLock lock(&mu_);
    forwards.swap(held_);
    for (auto& [waiter, forward] : forwards_) forwards.push_back(std::move(forward));
    for (auto& [key, forward] : shared_) forwards.push_back(std::move(forward));
    forwards.insert(forwards.end(), live_.begin(), live_.end());
    forwards_.clear();
    shared_.clear();
    live_.clear();
    watches.swap(held_watches_);
    park = link_.TakePark();
  }
  forwards.clear();
  watches.clear();
  park.reset();
  stub_.reset();
  cohort_stub_.reset();
  ReleaseChannel(&channel_);
}

void UpstreamBackend::Start() {
  absl::MutexLock lock(&mu_);
  if (started_ || link_.state() == Link::kStopped) return;
  started_ = true;
  link_thread_ = std::thread([this] { LinkLoop(); });
}

UpstreamBackend::Link UpstreamBackend::link() const {
  absl::MutexLock lock(&mu_);
  return link_.state();
}

bool UpstreamBackend::AwaitLink(Link want, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto reached = [this, want]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return link_.state() == want; };
  return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
}

int64_t UpstreamBackend::reissued_calls() const {
  absl::MutexLock lock(&mu_);
  return reissued_;
}

int64_t UpstreamBackend::outages() const {
  absl::MutexLock lock(&mu_);
  return link_.outages();
}

int64_t UpstreamBackend::parked_calls() const {
  std::shared_ptr<UpstreamPark> park;
  {
    absl::MutexLock lock(&mu_);
    park = link_.park();
  }
  return park ? static_cast<int64_t>(park->open_calls()) : 0;
}

void UpstreamBackend::SimulateLinkLossForTest() {
  absl::MutexLock lock(&mu_);
  link_.MarkDown();
}

int64_t UpstreamBackend::held_calls() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(held_.size());
}

uint64_t UpstreamBackend::service_incarnation() const {
  absl::MutexLock lock(&mu_);
  return link_.service_incarnation();
}

WaiterId UpstreamBackend::NewWaiterId() {
  absl::MutexLock lock(&mu_);
  return ++next_waiter_;
}

absl::StatusOr<TaskName> UpstreamBackend::ResolveTask(const std::string& job, int32_t id) const {
  std::shared_ptr<const KnownJobs> jobs;
  {
    absl::MutexLock lock(&mu_);
    jobs = jobs_;
  }
  // Before the coordinator was first reached the name goes as given (an empty job is the
  // coordinator's default job) and the coordinator judges it.
  if (!jobs) return TaskName{job, id};
  return jobs->directory().ResolveTask(job, id);
}

void UpstreamBackend::Stop(const absl::Status& why) {
  std::vector<std::shared_ptr<Forward>> live;
  std::vector<std::shared_ptr<UpstreamKeyWatch>> watches;
  std::shared_ptr<UpstreamPark> park;
  {
    absl::MutexLock lock(&mu_);
    if (!link_.Stop(why)) return;
    for (const auto& op : live_) {
      if (!op->parked_on) live.push_back(op);
    }
    park = link_.TakePark();
    // A blocking call with no callback of ours: safe to cancel under the lock.
    if (probe_context_) probe_context_->TryCancel();
    for (auto& [waiter, watch] : watches_) watches.push_back(watch);
    watches_.clear();
  }
  // Their contexts stay: an attempt's context is replaced only by Issue, which a stopped
  // backend refuses.
  for (const auto& op : live) op->context->TryCancel();
  // Every call on the park stream ends with it.
  if (park) park->Shutdown();
  FailAll(why);
  for (const auto& watch : watches) watch->End(why);
  if (link_thread_.joinable()) link_thread_.join();
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
  mu_.Await(absl::Condition(&idle));
}

// ---- The link: probing, re-establishing, giving up -------------------------------------

void UpstreamBackend::HoldWatch(const std::shared_ptr<UpstreamKeyWatch>& watch) {
  bool resume = false;
  absl::Status failed;
  {
    absl::MutexLock lock(&mu_);
    if (link_.ended()) {
      failed = link_.failure();
    } else {
      link_.MarkDown();
      if (link_.connected()) {
        resume = true;
      } else {
        held_watches_.push_back(watch);
      }
    }
  }
  if (!failed.ok()) watch->End(failed);
  if (resume) watch->Begin(cohort_stub_->async());
}

bool UpstreamBackend::Probe(v1::ClusterSnapshot* snapshot) {
  grpc::ClientContext ctx;
  ctx.set_wait_for_ready(true);
  ctx.set_deadline(
      absl::ToChronoTime(absl::Now() + std::max(options_.probe_interval, absl::Seconds(1))));
  {
    absl::MutexLock lock(&mu_);
    if (link_.state() == Link::kStopped) return false;
    probe_context_ = &ctx;
  }
  grpc::Status status =
      cohort_stub_->GetClusterSnapshot(&ctx, v1::GetClusterSnapshotRequest(), snapshot);
  absl::MutexLock lock(&mu_);
  probe_context_ = nullptr;
  link_.RecordProbe(status);
  return status.ok();
}

void UpstreamBackend::LinkLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto wanted = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !link_.connected(); };
      mu_.Await(absl::Condition(&wanted));
      if (link_.state() == Link::kStopped) return;
    }
    ExpireHeld();
    v1::ClusterSnapshot snapshot;
    if (Probe(&snapshot) && Reestablish(snapshot)) continue;

    absl::Status failed;
    {
      absl::MutexLock lock(&mu_);
      failed = link_.FailIfPastTolerance();
    }
    if (!failed.ok()) {
      spdlog::error("proxy: {}; failing every call", std::string(failed.message()));
      FailAll(failed);
    }
    absl::MutexLock lock(&mu_);
    auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return link_.state() == Link::kStopped;
    };
    mu_.AwaitWithTimeout(absl::Condition(&stopped), link_.state() == Link::kFailed
                                                        ? absl::Seconds(1)
                                                        : options_.probe_interval);
  }
}

bool UpstreamBackend::Reestablish(const v1::ClusterSnapshot& snapshot) {
  const uint64_t incarnation = snapshot.service_incarnation();
  std::vector<std::pair<TaskName, uint64_t>> to_register;
  absl::Status lost;
  {
    absl::MutexLock lock(&mu_);
    if (link_.state() == Link::kStopped) return false;
    jobs_ = std::make_shared<const KnownJobs>(snapshot);
    lost = link_.LostJobError(incarnation);
    if (lost.ok() && link_.state() == Link::kDown) to_register = tasks_.Registered();
  }
  if (!lost.ok()) {
    spdlog::error("proxy: {}", std::string(lost.message()));
    FailAll(lost);
  }

  // Every task registers again with its own incarnation before anything else is sent: a
  // restarted coordinator knows them (durable state) and answers OK, or one without state
  // learns them again.
  struct Pending {
    absl::Mutex mu;
    size_t left ABSL_GUARDED_BY(mu) = 0;
    bool outage ABSL_GUARDED_BY(mu) = false;
  };
  auto pending = std::make_shared<Pending>();
  {
    absl::MutexLock lock(&pending->mu);
    pending->left = to_register.size();
  }
  for (const auto& [task, task_incarnation] : to_register) {
    tf::RegisterTaskRequest request;
    request.set_incarnation(task_incarnation);
    *request.mutable_source_task() = ToWireTask(task);
    SendOptions options;
    options.bypass_link = true;
    Send<tf::RegisterTaskResponse>(
        CallContext{}, &Async::RegisterTask, std::move(request),
        [this, pending, task = task](const absl::Status& s, const tf::RegisterTaskResponse&) {
          if (!s.ok() && !IsOutage(s)) {
            spdlog::error("proxy: {} could not register again: {}", task.ToString(),
                          std::string(s.message()));
            absl::MutexLock lock(&mu_);
            tasks_.SetHeartbeatError(task, s);
          }
          absl::MutexLock lock(&pending->mu);
          if (IsOutage(s)) pending->outage = true;
          --pending->left;
        },
        std::move(options));
  }
  {
    absl::MutexLock lock(&pending->mu);
    auto done = [&pending]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(pending->mu) { return pending->left == 0; };
    pending->mu.Await(absl::Condition(&done));
    if (pending->outage) return false;
  }

  std::vector<std::shared_ptr<Forward>> held;
  std::vector<std::shared_ptr<UpstreamKeyWatch>> watches;
  std::vector<std::pair<TaskName, uint64_t>> heartbeats;
  std::shared_ptr<UpstreamPark> old_park;
  absl::Duration outage;
  Link was;
  {
    absl::MutexLock lock(&mu_);
    if (link_.state() == Link::kStopped) return false;
    was = link_.state();
    outage = link_.downtime();
    old_park = link_.Connect(incarnation, cohort_stub_.get());
    held.swap(held_);
    watches.swap(held_watches_);
    heartbeats = tasks_.Registered();
  }
  spdlog::info(
      "proxy: coordinator at {} reached (service incarnation {:#x}){}; sending {} "
      "held calls and {} watches",
      options_.address, incarnation,
      was == Link::kDown ? absl::StrCat(" after ", absl::FormatDuration(outage), " away") : "",
      held.size(), watches.size());
  if (old_park) old_park->Shutdown();
  for (const auto& [task, task_incarnation] : heartbeats) ForwardHeartbeat(task, task_incarnation);
  for (const auto& op : held) Issue(op);
  for (const auto& watch : watches) watch->Begin(cohort_stub_->async());
  return true;
}

void UpstreamBackend::ExpireHeld() {
  std::vector<std::shared_ptr<Forward>> expired;
  absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    auto late = [now](const std::shared_ptr<Forward>& op) { return op->deadline <= now; };
    std::copy_if(held_.begin(), held_.end(), std::back_inserter(expired), late);
    held_.erase(std::remove_if(held_.begin(), held_.end(), late), held_.end());
  }
  for (const auto& op : expired) {
    Finish(op, absl::DeadlineExceededError(
                   "the call's deadline passed while the coordinator was unreachable"));
  }
}

void UpstreamBackend::FailAll(const absl::Status& status) {
  std::vector<std::shared_ptr<Forward>> held;
  std::vector<std::shared_ptr<UpstreamKeyWatch>> watches;
  std::vector<StatusDone> polls;
  {
    absl::MutexLock lock(&mu_);
    held.swap(held_);
    watches.swap(held_watches_);
    polls = tasks_.Clear();
  }
  for (const auto& op : held) Finish(op, status);
  for (const auto& watch : watches) watch->End(status);
  for (auto& poll : polls) poll(status);
}

}  // namespace cohort
