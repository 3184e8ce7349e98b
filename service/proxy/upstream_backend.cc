// UpstreamBackend: construction, the forwarding of calls (holding them across outages), and
// the link to the coordinator (probing, re-establishing, giving up past the tolerance).
#include "service/proxy/upstream_backend.h"

#include <algorithm>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_auth.h"
#include "common/grpc_channel.h"
#include "service/core/errors.h"
#include "service/proxy/upstream_forward.h"
#include "service/proxy/upstream_key_watch.h"
#include "service/rpc/status_translation.h"
#include "spdlog/spdlog.h"

namespace cohort {
namespace {

namespace tf = tensorflow;

}  // namespace

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
      cohort_stub_(v1::Coordinator::NewStub(channel_)) {}

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
    park = std::move(park_);
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
  if (started_ || link_ == Link::kStopped) return;
  started_ = true;
  link_thread_ = std::thread([this] { LinkLoop(); });
}

UpstreamBackend::Link UpstreamBackend::link() const {
  absl::MutexLock lock(&mu_);
  return link_;
}

bool UpstreamBackend::AwaitLink(Link want, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto reached = [this, want]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return link_ == want; };
  return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
}

int64_t UpstreamBackend::reissued_calls() const {
  absl::MutexLock lock(&mu_);
  return reissued_;
}

int64_t UpstreamBackend::outages() const {
  absl::MutexLock lock(&mu_);
  return outages_;
}

int64_t UpstreamBackend::parked_calls() const {
  std::shared_ptr<UpstreamPark> park;
  {
    absl::MutexLock lock(&mu_);
    park = park_;
  }
  return park ? static_cast<int64_t>(park->open_calls()) : 0;
}

void UpstreamBackend::SimulateLinkLossForTest() {
  absl::MutexLock lock(&mu_);
  MarkDownLocked();
}

int64_t UpstreamBackend::held_calls() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(held_.size());
}

uint64_t UpstreamBackend::service_incarnation() const {
  absl::MutexLock lock(&mu_);
  return service_incarnation_;
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

absl::Status UpstreamBackend::OutageError() const {
  return absl::UnavailableError(absl::StrCat(
      "the coordinator at ", options_.address, " has been unreachable for ",
      absl::FormatDuration(absl::Trunc(absl::Now() - down_since_, absl::Milliseconds(1))),
      ", longer than the sidecar proxy's outage tolerance (",
      absl::FormatDuration(options_.outage_tolerance), ")",
      refusal_.ok() ? "" : absl::StrCat("; it refuses the proxy: ", refusal_.ToString())));
}
// ---- Forwarding ------------------------------------------------------------------------

void UpstreamBackend::Submit(const std::shared_ptr<Forward>& op, WaiterId waiter,
                             Subscriber subscriber) {
  std::shared_ptr<Forward> target = op;
  absl::Status refused;
  Subscriber refuse;  // answered at once, outside the lock
  bool issue = false;
  {
    absl::MutexLock lock(&mu_);
    const std::string& key = op->options.share_key;
    if (!key.empty()) {
      if (auto it = shared_.find(key); it != shared_.end()) target = it->second;
    }
    if (target == op) {
      if (link_ == Link::kFailed || link_ == Link::kStopped) {
        refused = failure_;
      } else if (link_ == Link::kConnected || op->options.bypass_link) {
        issue = true;
      } else if (op->options.fail_fast) {
        refused =
            link_ == Link::kDown
                ? OutageError()
                : absl::UnavailableError(absl::StrCat(
                      "the coordinator at ", options_.address, " has not been reached yet",
                      refusal_.ok()
                          ? ""
                          : absl::StrCat(" (it refuses the proxy: ", refusal_.ToString(), ")")));
      } else {
        held_.push_back(op);
      }
      if (refused.ok() && !key.empty()) shared_[key] = op;
    }
    if (refused.ok()) {
      target->subscribers.emplace_back(waiter, std::move(subscriber));
      if (waiter != 0) forwards_[waiter] = target;
    } else {
      refuse = std::move(subscriber);
    }
  }
  if (refuse) {
    refuse(refused, *op->response);
    return;
  }
  if (issue) Issue(op);
}

void UpstreamBackend::Issue(const std::shared_ptr<Forward>& op) {
  grpc::ClientContext* ctx = nullptr;
  std::shared_ptr<UpstreamPark> park;
  uint64_t park_id = 0;
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    if (op->abandoned || op->finished) return;
    if (link_ == Link::kStopped) {
      refused = failure_;
    } else {
      if (++op->attempts > 1) ++reissued_;
      ++in_flight_;
      live_.insert(op);
      op->parked_on.reset();
      if (op->park && park_ && park_->ended() && !park_->refused() && link_ == Link::kConnected) {
        // The stream ended while the coordinator stayed reachable (a reset stream, a proxy
        // in between): a new one, rather than an outage.
        park_ = UpstreamPark::Open(cohort_stub_.get());
      }
      if (op->park && park_) {
        park = park_;
        park_id = park->NextId();
        op->parked_on = park;
        op->park_id = park_id;
      } else {
        op->context = std::make_unique<grpc::ClientContext>();
        if (op->deadline != absl::InfiniteFuture()) {
          op->context->set_deadline(absl::ToChronoTime(op->deadline));
        }
        ctx = op->context.get();
      }
    }
  }
  if (!refused.ok()) return Finish(op, refused);
  if (!park) {
    op->start(ctx, [this, op](const grpc::Status& wire) { OnAttemptDone(op, wire); });
    return;
  }
  v1::ParkRequest request;
  op->park(&request);
  park->Send(park_id, std::move(request),
             [this, op](const grpc::Status& wire, const v1::ParkResponse& response) {
               if (wire.ok()) op->take_park_result(response);
               OnAttemptDone(op, wire);
             });
  // Abandoned while it was being sent: Cancel found no call open on the stream yet.
  bool abandoned = false;
  {
    absl::MutexLock lock(&mu_);
    abandoned = op->abandoned;
  }
  if (abandoned) park->Cancel(park_id);
}

void UpstreamBackend::OnAttemptDone(const std::shared_ptr<Forward>& op, const grpc::Status& wire) {
  // Counted out only at the very end: Stop waits for it, and the backend must outlive
  // everything this does (subscribers included).
  auto done = absl::MakeCleanup([this] {
    absl::MutexLock lock(&mu_);
    --in_flight_;
  });
  absl::Status status = CoreStatusFromGrpc(wire);
  bool again = false;
  {
    absl::MutexLock lock(&mu_);
    live_.erase(op);
    if (op->abandoned) return;
    if (op->parked_on && op->parked_on->refused()) {
      // A coordinator that will not take a park stream (none, or a policy refuses it): this
      // call and every later one go unary until the next reconnection tries again. The
      // attempt does not count as sent: it never reached the service.
      if (!park_unsupported_) {
        spdlog::warn(
            "proxy: the coordinator at {} refuses the park stream ({} {}); waiting "
            "calls go as a gRPC call each",
            options_.address, static_cast<int>(wire.error_code()), wire.error_message());
      }
      park_unsupported_ = true;
      if (park_ == op->parked_on) park_.reset();
      --op->attempts;
      again = true;
    } else if (op->parked_on && op->parked_on != park_ && IsOutage(status) &&
               link_ == Link::kConnected) {
      // Its stream was replaced while the coordinator stayed reachable: send it again on the
      // current one, no outage.
      --op->attempts;
      again = true;
    }
  }
  if (again) return Issue(op);
  {
    absl::MutexLock lock(&mu_);
    if (IsOutage(status)) {
      if (link_ == Link::kFailed || link_ == Link::kStopped) {
        status = failure_;
      } else {
        MarkDownLocked();
        if (!op->options.fail_fast && !op->options.bypass_link) {
          held_.push_back(op);
          return;
        }
      }
    }
  }
  if (op->attempts > 1 && !status.ok() && op->options.reconcile_reissued) {
    op->options.reconcile_reissued(status, [this, op](const absl::Status& s) { Finish(op, s); });
    return;
  }
  Finish(op, status);
}

void UpstreamBackend::Finish(const std::shared_ptr<Forward>& op, const absl::Status& status) {
  std::vector<std::pair<WaiterId, Subscriber>> subscribers;
  {
    absl::MutexLock lock(&mu_);
    if (op->finished) return;
    op->finished = true;
    subscribers.swap(op->subscribers);
    for (const auto& [waiter, subscriber] : subscribers) {
      if (waiter != 0) forwards_.erase(waiter);
    }
    const std::string& key = op->options.share_key;
    if (auto it = shared_.find(key); !key.empty() && it != shared_.end() && it->second == op) {
      shared_.erase(it);
    }
  }
  for (auto& [waiter, subscriber] : subscribers) subscriber(status, *op->response);
}

void UpstreamBackend::Cancel(WaiterId waiter, const absl::Status& status) {
  std::shared_ptr<Forward> op;
  Subscriber subscriber;
  grpc::ClientContext* abandoned_context = nullptr;
  std::shared_ptr<UpstreamPark> abandoned_park;
  uint64_t abandoned_park_id = 0;
  StatusDone poll;
  std::shared_ptr<UpstreamKeyWatch> watch;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = forwards_.find(waiter); it != forwards_.end()) {
      op = it->second;
      forwards_.erase(it);
      auto& subs = op->subscribers;
      for (auto s = subs.begin(); s != subs.end(); ++s) {
        if (s->first != waiter) continue;
        subscriber = std::move(s->second);
        subs.erase(s);
        break;
      }
      if (subs.empty() && !op->finished) {
        op->abandoned = true;
        op->finished = true;
        held_.erase(std::remove(held_.begin(), held_.end(), op), held_.end());
        const std::string& key = op->options.share_key;
        if (auto s = shared_.find(key); !key.empty() && s != shared_.end() && s->second == op) {
          shared_.erase(s);
        }
        if (live_.contains(op)) {
          if (op->parked_on) {
            abandoned_park = op->parked_on;
            abandoned_park_id = op->park_id;
          } else {
            abandoned_context = op->context.get();
          }
        }
      }
    } else if (auto p = local_polls_.find(waiter); p != local_polls_.end()) {
      if (auto t = tasks_.find(p->second); t != tasks_.end()) {
        auto& polls = t->second->polls;
        for (auto q = polls.begin(); q != polls.end(); ++q) {
          if (q->first != waiter) continue;
          poll = std::move(q->second);
          polls.erase(q);
          break;
        }
      }
      local_polls_.erase(p);
    } else if (auto w = watches_.find(waiter); w != watches_.end()) {
      watch = w->second;
      watches_.erase(w);
    }
  }
  if (abandoned_context) abandoned_context->TryCancel();
  if (abandoned_park) abandoned_park->Cancel(abandoned_park_id);
  if (subscriber) subscriber(status, *op->response);
  if (poll) poll(status);
  if (watch) watch->End(status);
}
// ---- The link --------------------------------------------------------------------------

void UpstreamBackend::MarkDownLocked() {
  if (link_ != Link::kConnected) return;
  link_ = Link::kDown;
  down_since_ = absl::Now();
  ++outages_;
  spdlog::warn("proxy: lost the coordinator at {}; holding calls for up to {}", options_.address,
               absl::FormatDuration(options_.outage_tolerance));
}

void UpstreamBackend::HoldWatch(const std::shared_ptr<UpstreamKeyWatch>& watch) {
  bool resume = false;
  absl::Status failed;
  {
    absl::MutexLock lock(&mu_);
    if (link_ == Link::kFailed || link_ == Link::kStopped) {
      failed = failure_;
    } else {
      MarkDownLocked();
      if (link_ == Link::kConnected) {
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
    if (link_ == Link::kStopped) return false;
    probe_context_ = &ctx;
  }
  grpc::Status status =
      cohort_stub_->GetClusterSnapshot(&ctx, v1::GetClusterSnapshotRequest(), snapshot);
  absl::MutexLock lock(&mu_);
  probe_context_ = nullptr;
  // A coordinator that answers but refuses the proxy is reached and still of no use: say
  // why, once, and in the error callers get past the tolerance.
  if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
      status.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
    if (refusal_.ok()) {
      spdlog::error(
          "proxy: the coordinator at {} refuses the proxy: {} (does the sidecar's "
          "--auth-token-file hold the job's token?)",
          options_.address, status.error_message());
    }
    refusal_ =
        absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  } else {
    refusal_ = absl::OkStatus();
  }
  return status.ok();
}

void UpstreamBackend::LinkLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto wanted = [this]()
                        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return link_ != Link::kConnected; };
      mu_.Await(absl::Condition(&wanted));
      if (link_ == Link::kStopped) return;
    }
    ExpireHeld();
    v1::ClusterSnapshot snapshot;
    if (Probe(&snapshot) && Reestablish(snapshot)) continue;

    absl::Status failed;
    {
      absl::MutexLock lock(&mu_);
      if (link_ == Link::kDown && absl::Now() - down_since_ > options_.outage_tolerance) {
        failed = OutageError();
        link_ = Link::kFailed;
        failure_ = failed;
      }
    }
    if (!failed.ok()) {
      spdlog::error("proxy: {}; failing every call", std::string(failed.message()));
      FailAll(failed);
    }
    absl::MutexLock lock(&mu_);
    auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return link_ == Link::kStopped; };
    mu_.AwaitWithTimeout(absl::Condition(&stopped),
                         link_ == Link::kFailed ? absl::Seconds(1) : options_.probe_interval);
  }
}

bool UpstreamBackend::Reestablish(const v1::ClusterSnapshot& snapshot) {
  const uint64_t incarnation = snapshot.service_incarnation();
  std::vector<std::pair<TaskName, uint64_t>> to_register;
  uint64_t lost_incarnation = 0;
  {
    absl::MutexLock lock(&mu_);
    if (link_ == Link::kStopped) return false;
    jobs_ = std::make_shared<const KnownJobs>(snapshot);
    if (link_ == Link::kDown && service_incarnation_ != 0 && service_incarnation_ != incarnation) {
      lost_incarnation = service_incarnation_;
    } else if (link_ == Link::kDown) {
      for (const auto& [name, task] : tasks_) {
        if (!task->left) to_register.emplace_back(name, task->incarnation);
      }
    }
  }
  if (lost_incarnation != 0) {
    absl::Status lost = absl::UnavailableError(absl::StrCat(
        "the coordinator at ", options_.address, " came back as service incarnation ", incarnation,
        " instead of ", lost_incarnation,
        ": it lost the job's state (run it with --state-dir to keep it across restarts)"));
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
            if (auto t = tasks_.find(task); t != tasks_.end()) t->second->heartbeat_error = s;
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
    if (link_ == Link::kStopped) return false;
    was = link_;
    outage = was == Link::kDown ? absl::Now() - down_since_ : absl::ZeroDuration();
    link_ = Link::kConnected;
    service_incarnation_ = incarnation;
    // A park stream that ended (with the old connection) is replaced; one still open keeps
    // its calls, which the coordinator still holds (the link went down on another call).
    // A coordinator that refused one is asked again after an outage (it may be newer now).
    if (was == Link::kDown) park_unsupported_ = false;
    if (park_ && park_->ended()) old_park = std::move(park_);
    if (!park_ && !park_unsupported_) park_ = UpstreamPark::Open(cohort_stub_.get());
    held.swap(held_);
    watches.swap(held_watches_);
    for (const auto& [name, task] : tasks_) {
      if (!task->left) heartbeats.emplace_back(name, task->incarnation);
    }
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
    for (auto& [name, task] : tasks_) {
      for (auto& [waiter, poll] : task->polls) {
        local_polls_.erase(waiter);
        polls.push_back(std::move(poll));
      }
    }
    tasks_.clear();
  }
  for (const auto& op : held) Finish(op, status);
  for (const auto& watch : watches) watch->End(status);
  for (auto& poll : polls) poll(status);
}

void UpstreamBackend::Stop(const absl::Status& why) {
  std::vector<std::shared_ptr<Forward>> live;
  std::vector<std::shared_ptr<UpstreamKeyWatch>> watches;
  std::shared_ptr<UpstreamPark> park;
  {
    absl::MutexLock lock(&mu_);
    if (link_ == Link::kStopped) return;
    link_ = Link::kStopped;
    failure_ = why;
    for (const auto& op : live_) {
      if (!op->parked_on) live.push_back(op);
    }
    park = std::move(park_);
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
}  // namespace cohort
