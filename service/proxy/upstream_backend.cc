#include "service/proxy/upstream_backend.h"

#include <algorithm>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "service/core/errors.h"
#include "service/proxy/upstream_key_watch.h"
#include "service/rpc/status_translation.h"
#include "spdlog/spdlog.h"

namespace cohort {
namespace {

namespace tf = tensorflow;

std::shared_ptr<grpc::Channel> MakeChannel(const UpstreamOptions& options) {
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
  auto credentials = options.credentials ? options.credentials : grpc::InsecureChannelCredentials();
  return grpc::CreateCustomChannel(options.address, credentials, args);
}

}  // namespace

// One call to the coordinator on behalf of its subscribers (one caller, or several that
// asked the same). Attempts are sequential: one is sent again only after the previous
// one ended for want of the coordinator.
struct UpstreamBackend::Forward {
  std::function<void(grpc::ClientContext*, std::function<void(grpc::Status)>)> start;
  const google::protobuf::Message* response = nullptr;
  std::shared_ptr<void> messages;  // the request and the response
  SendOptions options;
  absl::Time deadline = absl::InfiniteFuture();
  // Guarded by the backend's mu_.
  std::vector<std::pair<WaiterId, Subscriber>> subscribers;
  std::unique_ptr<grpc::ClientContext> context;
  int attempts = 0;
  bool abandoned = false;  // every subscriber went away
  bool finished = false;
};

// A task registered through this proxy.
struct UpstreamBackend::LocalTask {
  uint64_t incarnation = 0;
  uint64_t generation = 0;
  bool left = false;  // shut down or reset: not registered again on reconnect
  bool poll_running = false;
  absl::Status heartbeat_error;  // the service's answer to a forwarded heartbeat
  std::optional<absl::Status> poll_result;
  std::vector<std::pair<WaiterId, StatusDone>> polls;  // local callers' polls
};

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
      channel_(MakeChannel(options_)),
      stub_(tf::CoordinationService::NewStub(channel_)),
      cohort_stub_(v1::Coordinator::NewStub(channel_)) {}

UpstreamBackend::~UpstreamBackend() {
  Stop(absl::UnavailableError("the sidecar proxy is shutting down"));
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
      absl::FormatDuration(options_.outage_tolerance), ")"));
}

// ---- Forwarding ------------------------------------------------------------------------

template <typename Resp, typename Req, typename AsyncStub>
void SendVia(AsyncStub* async,
             void (AsyncStub::*method)(grpc::ClientContext*, const Req*, Resp*,
                                       std::function<void(grpc::Status)>),
             std::shared_ptr<std::pair<Req, Resp>> messages, grpc::ClientContext* ctx,
             std::function<void(grpc::Status)> done) {
  messages->second.Clear();
  (async->*method)(ctx, &messages->first, &messages->second, std::move(done));
}

template <typename Resp, typename Req>
void UpstreamBackend::Send(const CallContext& call,
                           void (Async::*method)(grpc::ClientContext*, const Req*, Resp*,
                                                 std::function<void(grpc::Status)>),
                           Req request, std::function<void(const absl::Status&, const Resp&)> done,
                           SendOptions options) {
  auto messages = std::make_shared<std::pair<Req, Resp>>();
  messages->first = std::move(request);
  auto op = std::make_shared<Forward>();
  Async* async = stub_->async();
  op->start = [async, method, messages](grpc::ClientContext* ctx,
                                        std::function<void(grpc::Status)> d) {
    SendVia(async, method, messages, ctx, std::move(d));
  };
  op->response = &messages->second;
  op->messages = messages;
  // A shared call serves callers with different deadlines; each leaves on its own.
  op->deadline =
      options.share_key.empty() ? std::min(call.deadline, options.deadline) : options.deadline;
  op->options = std::move(options);
  Submit(op, call.waiter,
         [done = std::move(done)](const absl::Status& s, const google::protobuf::Message& m) {
           done(s, static_cast<const Resp&>(m));
         });
}

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
        refused = link_ == Link::kDown
                      ? OutageError()
                      : absl::UnavailableError(absl::StrCat("the coordinator at ", options_.address,
                                                            " has not been reached yet"));
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
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    if (op->abandoned || op->finished) return;
    if (link_ == Link::kStopped) {
      refused = failure_;
    } else {
      op->context = std::make_unique<grpc::ClientContext>();
      if (op->deadline != absl::InfiniteFuture()) {
        op->context->set_deadline(absl::ToChronoTime(op->deadline));
      }
      if (++op->attempts > 1) ++reissued_;
      ++in_flight_;
      live_.insert(op);
      ctx = op->context.get();
    }
  }
  if (!refused.ok()) return Finish(op, refused);
  op->start(ctx, [this, op](const grpc::Status& wire) { OnAttemptDone(op, wire); });
}

void UpstreamBackend::OnAttemptDone(const std::shared_ptr<Forward>& op, const grpc::Status& wire) {
  // Counted out only at the very end: Stop waits for it, and the backend must outlive
  // everything this does (subscribers included).
  auto done = absl::MakeCleanup([this] {
    absl::MutexLock lock(&mu_);
    --in_flight_;
  });
  absl::Status status = CoreStatusFromGrpc(wire);
  {
    absl::MutexLock lock(&mu_);
    live_.erase(op);
    if (op->abandoned) return;
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
        if (live_.contains(op)) abandoned_context = op->context.get();
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
  absl::Duration outage;
  Link was;
  {
    absl::MutexLock lock(&mu_);
    if (link_ == Link::kStopped) return false;
    was = link_;
    outage = was == Link::kDown ? absl::Now() - down_since_ : absl::ZeroDuration();
    link_ = Link::kConnected;
    service_incarnation_ = incarnation;
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
  {
    absl::MutexLock lock(&mu_);
    if (link_ == Link::kStopped) return;
    link_ = Link::kStopped;
    failure_ = why;
    live.assign(live_.begin(), live_.end());
    // A blocking call with no callback of ours: safe to cancel under the lock.
    if (probe_context_) probe_context_->TryCancel();
    for (auto& [waiter, watch] : watches_) watches.push_back(watch);
    watches_.clear();
  }
  // Their contexts stay: an attempt's context is replaced only by Issue, which a stopped
  // backend refuses.
  for (const auto& op : live) op->context->TryCancel();
  FailAll(why);
  for (const auto& watch : watches) watch->End(why);
  if (link_thread_.joinable()) link_thread_.join();
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
  mu_.Await(absl::Condition(&idle));
}

// ---- Tasks -----------------------------------------------------------------------------

void UpstreamBackend::OnRegistered(const TaskName& task, uint64_t incarnation) {
  uint64_t generation = 0;
  {
    absl::MutexLock lock(&mu_);
    auto& record = tasks_[task];
    if (!record) record = std::make_unique<LocalTask>();
    if (record->incarnation != incarnation || record->left) {
      record->incarnation = incarnation;
      record->left = false;
      record->heartbeat_error = absl::OkStatus();
      record->poll_result.reset();
      record->generation = ++next_generation_;
    }
    if (record->poll_running || record->poll_result) return;
    record->poll_running = true;
    generation = record->generation;
  }
  StartTaskPoll(task, generation);
}

void UpstreamBackend::StartTaskPoll(const TaskName& task, uint64_t generation) {
  // The proxy's own poll: whatever the task's clients do, the coordinator sees one poll
  // per task, and the clients' polls wait here, across outages.
  tf::PollForErrorRequest request;
  *request.mutable_source_task() = ToWireTask(task);
  Send<tf::PollForErrorResponse>(
      CallContext{}, &Async::PollForError, std::move(request),
      [this, task, generation](const absl::Status& s, const tf::PollForErrorResponse&) {
        OnTaskPollDone(task, generation, s);
      });
}

void UpstreamBackend::OnTaskPollDone(const TaskName& task, uint64_t generation,
                                     const absl::Status& status) {
  std::vector<std::pair<WaiterId, StatusDone>> polls;
  {
    absl::MutexLock lock(&mu_);
    auto it = tasks_.find(task);
    if (it == tasks_.end() || it->second->generation != generation) return;
    LocalTask& record = *it->second;
    record.poll_running = false;
    record.poll_result = status;
    polls.swap(record.polls);
    for (const auto& [waiter, poll] : polls) local_polls_.erase(waiter);
    auto source = GetServiceError(status);
    if (!status.ok() && propagated_.ok() && source && source->source) propagated_ = status;
    if (record.left) tasks_.erase(it);
  }
  for (auto& [waiter, poll] : polls) poll(status);
}

void UpstreamBackend::Forget(const TaskName& task) {
  absl::MutexLock lock(&mu_);
  auto it = tasks_.find(task);
  if (it == tasks_.end()) return;
  it->second->left = true;
  if (!it->second->poll_running) tasks_.erase(it);
}

void UpstreamBackend::ForwardHeartbeat(const TaskName& task, uint64_t incarnation) {
  tf::HeartbeatRequest request;
  request.set_incarnation(incarnation);
  *request.mutable_source_task() = ToWireTask(task);
  SendOptions options;
  options.fail_fast = true;
  Send<tf::HeartbeatResponse>(
      CallContext{0, absl::Now() + options_.heartbeat_timeout}, &Async::Heartbeat,
      std::move(request),
      [this, task, incarnation](const absl::Status& s, const tf::HeartbeatResponse&) {
        if (s.ok() || IsOutage(s) || s.code() == absl::StatusCode::kDeadlineExceeded) return;
        absl::MutexLock lock(&mu_);
        auto it = tasks_.find(task);
        if (it != tasks_.end() && it->second->incarnation == incarnation) {
          it->second->heartbeat_error = s;
        }
      },
      std::move(options));
}

void UpstreamBackend::RegisterTask(const CallContext& call, const TaskName& task,
                                   uint64_t incarnation, StatusDone done) {
  tf::RegisterTaskRequest request;
  request.set_incarnation(incarnation);
  *request.mutable_source_task() = ToWireTask(task);
  Send<tf::RegisterTaskResponse>(call, &Async::RegisterTask, std::move(request),
                                 [this, task, incarnation, done = std::move(done)](
                                     const absl::Status& s, const tf::RegisterTaskResponse& r) {
                                   if (s.ok()) {
                                     {
                                       absl::MutexLock lock(&mu_);
                                       service_incarnation_ = r.leader_incarnation();
                                     }
                                     OnRegistered(task, incarnation);
                                   }
                                   done(s);
                                 });
}

void UpstreamBackend::Heartbeat(const CallContext& call, const TaskName& task,
                                std::optional<uint64_t> incarnation, StatusDone done) {
  absl::Status answer;
  uint64_t registered = 0;
  bool local = false, forward = false;
  {
    absl::MutexLock lock(&mu_);
    if (link_ == Link::kFailed || link_ == Link::kStopped) {
      answer = failure_;
      local = true;
    } else if (auto it = tasks_.find(task);
               it != tasks_.end() && !it->second->left &&
               (!incarnation || *incarnation == it->second->incarnation)) {
      // Answered here: the coordinator may be away for a while, and the task is alive.
      local = true;
      answer = it->second->heartbeat_error;
      registered = it->second->incarnation;
      forward = answer.ok() && link_ == Link::kConnected;
    }
  }
  if (local) {
    if (forward) ForwardHeartbeat(task, registered);
    return done(answer);
  }
  auto send = [this, call, task, done](uint64_t with) {
    tf::HeartbeatRequest request;
    request.set_incarnation(with);
    *request.mutable_source_task() = ToWireTask(task);
    Send<tf::HeartbeatResponse>(
        call, &Async::Heartbeat, std::move(request),
        [done](const absl::Status& s, const tf::HeartbeatResponse&) { done(s); });
  };
  if (incarnation) return send(*incarnation);
  // A heartbeat that names no incarnation, of a task not registered here: the one the
  // coordinator knows.
  GetTaskStates(call, {task}, [send, done](absl::StatusOr<std::vector<TaskStateInfo>> states) {
    if (!states.ok()) return done(states.status());
    if (states->empty()) return done(absl::InternalError("no state for the task"));
    send((*states)[0].incarnation);
  });
}

absl::Status UpstreamBackend::CheckIncarnation(const TaskName& task, uint64_t incarnation) const {
  absl::MutexLock lock(&mu_);
  auto it = tasks_.find(task);
  if (it == tasks_.end() || it->second->left || it->second->incarnation == incarnation) {
    return absl::OkStatus();
  }
  return ServiceError(absl::AbortedError(
      absl::StrCat("request from ", task.ToString(), " carries incarnation ", incarnation,
                   " but the task is registered with incarnation ", it->second->incarnation)));
}

void UpstreamBackend::ShutdownTask(const CallContext& call, const TaskName& task, StatusDone done) {
  tf::ShutdownTaskRequest request;
  *request.mutable_source_task() = ToWireTask(task);
  SendOptions options;
  // The first attempt may have shut the task down before the coordinator went away.
  options.reconcile_reissued = [](const absl::Status& s,
                                  const std::function<void(absl::Status)>& finish) {
    finish(s.code() == absl::StatusCode::kFailedPrecondition ? absl::OkStatus() : s);
  };
  Send<tf::ShutdownTaskResponse>(
      call, &Async::ShutdownTask, std::move(request),
      [this, task, done = std::move(done)](const absl::Status& s, const tf::ShutdownTaskResponse&) {
        if (s.ok()) Forget(task);
        done(s);
      },
      std::move(options));
}

void UpstreamBackend::ResetTask(const CallContext& call, const TaskName& task, StatusDone done) {
  tf::ResetTaskRequest request;
  *request.mutable_source_task() = ToWireTask(task);
  Send<tf::ResetTaskResponse>(
      call, &Async::ResetTask, std::move(request),
      [this, task, done = std::move(done)](const absl::Status& s, const tf::ResetTaskResponse&) {
        if (s.ok()) Forget(task);
        done(s);
      });
}

void UpstreamBackend::ReportError(const CallContext& call, const TaskName& source,
                                  const absl::Status& error, StatusDone done) {
  tf::ReportErrorToServiceRequest request;
  request.set_error_code(static_cast<int32_t>(error.code()));
  request.set_error_message(std::string(error.message()));
  *request.mutable_error_origin() = ToWireTask(source);
  Send<tf::ReportErrorToServiceResponse>(
      call, &Async::ReportErrorToService, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::ReportErrorToServiceResponse&) {
        done(s);
      });
}

void UpstreamBackend::PollForError(const CallContext& call, const TaskName& task, StatusDone done) {
  std::vector<std::pair<WaiterId, StatusDone>> replaced;
  absl::Status refused;
  bool forward = false;
  StatusDone answer;  // when not parked here
  {
    absl::MutexLock lock(&mu_);
    auto it = tasks_.find(task);
    if (link_ == Link::kFailed || link_ == Link::kStopped) {
      refused = failure_;
      answer = std::move(done);
    } else if (it != tasks_.end() && !it->second->left && !it->second->poll_result) {
      // Waits here for the proxy's own poll of the task. One poll per task, as in the
      // core: a newer one replaces the older.
      replaced.swap(it->second->polls);
      for (const auto& [waiter, poll] : replaced) local_polls_.erase(waiter);
      it->second->polls.emplace_back(call.waiter, std::move(done));
      local_polls_[call.waiter] = task;
    } else {
      // Not registered here, or its poll already ended: the coordinator answers.
      forward = true;
      answer = std::move(done);
    }
  }
  if (!refused.ok()) return answer(refused);
  if (forward) {
    tf::PollForErrorRequest request;
    *request.mutable_source_task() = ToWireTask(task);
    Send<tf::PollForErrorResponse>(
        call, &Async::PollForError, std::move(request),
        [answer = std::move(answer)](const absl::Status& s, const tf::PollForErrorResponse&) {
          answer(s);
        });
    return;
  }
  for (auto& [waiter, poll] : replaced) {
    poll(absl::CancelledError(
        absl::StrCat("a newer error poll of ", task.ToString(), " replaced this one")));
  }
}

void UpstreamBackend::PropagatedError(const CallContext&, StatusDone done) {
  absl::Status answer;
  {
    absl::MutexLock lock(&mu_);
    answer = link_ == Link::kFailed || link_ == Link::kStopped ? failure_ : propagated_;
  }
  done(answer);
}

void UpstreamBackend::GetTaskStates(const CallContext& call, std::vector<TaskName> tasks,
                                    Done<std::vector<TaskStateInfo>> done) {
  tf::GetTaskStateRequest request;
  for (const TaskName& task : tasks) *request.add_source_task() = ToWireTask(task);
  Send<tf::GetTaskStateResponse>(
      call, &Async::GetTaskState, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::GetTaskStateResponse& r) {
        if (!s.ok()) return done(s);
        std::vector<TaskStateInfo> states;
        for (const auto& info : r.task_state()) states.push_back(FromWire(info));
        done(std::move(states));
      });
}

void UpstreamBackend::WatchJobState(const CallContext& call, const std::string& job,
                                    int64_t version, Done<JobStateView> done) {
  tf::WatchJobStateRequest request;
  request.set_job_name(job);
  request.set_version_number(version);
  SendOptions options;
  options.share_key = absl::StrCat("WatchJobState/", version, "/", job);
  Send<tf::WatchJobStateResponse>(
      call, &Async::WatchJobState, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::WatchJobStateResponse& r) {
        if (!s.ok()) return done(s);
        auto view = std::make_shared<JobStateSnapshot>();
        view->version = r.version_number();
        for (const auto& info : r.task_state()) view->tasks.push_back(FromWire(info));
        done(JobStateView(std::move(view)));
      },
      std::move(options));
}

void UpstreamBackend::GetAliveTasks(const CallContext& call, const TaskName& requester,
                                    std::vector<TaskName> tasks,
                                    Done<std::vector<AliveTask>> done) {
  tf::GetAliveTasksRequest request;
  *request.mutable_requesting_task() = ToWireTask(requester);
  for (const TaskName& task : tasks) *request.add_tasks() = ToWireTask(task);
  Send<tf::GetAliveTasksResponse>(
      call, &Async::GetAliveTasks, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::GetAliveTasksResponse& r) {
        if (!s.ok()) return done(s);
        std::vector<AliveTask> alive;
        for (int i = 0; i < r.alive_tasks_size(); ++i) {
          alive.push_back({TaskName{r.alive_tasks(i).job_name(), r.alive_tasks(i).task_id()},
                           i < r.incarnations_size() ? r.incarnations(i) : 0});
        }
        done(std::move(alive));
      });
}

void UpstreamBackend::WaitForAllTasks(const CallContext& call, const TaskName& task,
                                      std::string devices, Done<std::vector<std::string>> done) {
  tf::WaitForAllTasksRequest request;
  *request.mutable_source_task() = ToWireTask(task);
  *request.mutable_device_info() = WrapDevices(devices);
  Send<tf::WaitForAllTasksResponse>(
      call, &Async::WaitForAllTasks, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::WaitForAllTasksResponse& r) {
        if (!s.ok()) return done(s);
        done(UnwrapDevices(r.device_info()));
      });
}

// ---- Barriers --------------------------------------------------------------------------

void UpstreamBackend::Barrier(const CallContext& call, const std::string& id, int64_t counter,
                              absl::Duration timeout, const TaskName& caller,
                              std::vector<TaskName> tasks, Done<int64_t> done) {
  tf::BarrierRequest request;
  request.set_barrier_id(id);
  request.set_counter(counter);
  request.set_barrier_timeout_in_ms(timeout == absl::InfiniteDuration()
                                        ? 0
                                        : std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout)));
  *request.mutable_source_task() = ToWireTask(caller);
  for (const TaskName& task : tasks) *request.add_tasks() = ToWireTask(task);
  // A barrier sent again arrives again with the same counter: the coordinator counts the
  // caller once, or answers the instance's cached result.
  Send<tf::BarrierResponse>(
      call, &Async::Barrier, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::BarrierResponse& r) {
        if (!s.ok()) return done(s);
        done(r.counter());
      });
}

void UpstreamBackend::CancelBarrier(const CallContext& call, const std::string& id, int64_t counter,
                                    const TaskName& caller, StatusDone done) {
  tf::CancelBarrierRequest request;
  request.set_barrier_id(id);
  request.set_counter(counter);
  *request.mutable_source_task() = ToWireTask(caller);
  Send<tf::CancelBarrierResponse>(
      call, &Async::CancelBarrier, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::CancelBarrierResponse&) {
        done(s);
      });
}

// ---- Key-value store -------------------------------------------------------------------

void UpstreamBackend::InsertKeyValue(const CallContext& call, std::string key, std::string value,
                                     bool allow_overwrite, StatusDone done) {
  tf::InsertKeyValueRequest request;
  request.mutable_kv()->set_key(key);
  request.mutable_kv()->set_value(value);
  request.set_allow_overwrite(allow_overwrite);
  SendOptions options;
  if (!allow_overwrite) {
    // The first attempt may have stored the value before the coordinator went away: the
    // key holding exactly this value is that attempt's success, not ALREADY_EXISTS.
    options.reconcile_reissued = [this, key, value](
                                     const absl::Status& s,
                                     const std::function<void(absl::Status)>& finish) {
      if (s.code() != absl::StatusCode::kAlreadyExists) return finish(s);
      TryGetKeyValue(CallContext{}, key, [s, value, finish](absl::StatusOr<std::string> stored) {
        finish(stored.ok() && *stored == value ? absl::OkStatus() : s);
      });
    };
  }
  Send<tf::InsertKeyValueResponse>(
      call, &Async::InsertKeyValue, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::InsertKeyValueResponse&) {
        done(s);
      },
      std::move(options));
}

void UpstreamBackend::GetKeyValue(const CallContext& call, std::string key,
                                  std::optional<absl::Duration> timeout, Done<std::string> done) {
  tf::GetKeyValueRequest request;
  request.set_key(key);
  SendOptions options;
  absl::Time own_deadline = absl::InfiniteFuture();
  if (timeout) {
    own_deadline = absl::Now() + *timeout;
    options.deadline = own_deadline;
  } else {
    // Local callers waiting for the same key share one upstream get.
    options.share_key = absl::StrCat("GetKeyValue/", KeyValueStore::NormalizeKey(key));
  }
  Send<tf::GetKeyValueResponse>(
      call, &Async::GetKeyValue, std::move(request),
      [key, own_deadline, done = std::move(done)](const absl::Status& s,
                                                  const tf::GetKeyValueResponse& r) {
        if (s.code() == absl::StatusCode::kDeadlineExceeded && !GetServiceError(s) &&
            absl::Now() >= own_deadline) {
          return done(absl::DeadlineExceededError(absl::StrCat(
              "timed out waiting for key \"", KeyValueStore::NormalizeKey(key), "\"")));
        }
        if (!s.ok()) return done(s);
        done(r.kv().value());
      },
      std::move(options));
}

void UpstreamBackend::TryGetKeyValue(const CallContext& call, std::string key,
                                     Done<std::string> done) {
  tf::TryGetKeyValueRequest request;
  request.set_key(key);
  Send<tf::TryGetKeyValueResponse>(
      call, &Async::TryGetKeyValue, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::TryGetKeyValueResponse& r) {
        if (!s.ok()) return done(s);
        done(r.kv().value());
      });
}

void UpstreamBackend::IncrementKeyValue(const CallContext& call, std::string key, int64_t delta,
                                        Done<int64_t> done) {
  tf::IncrementKeyValueRequest request;
  request.set_key(key);
  request.set_increment(delta);
  Send<tf::IncrementKeyValueResponse>(
      call, &Async::IncrementKeyValue, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::IncrementKeyValueResponse& r) {
        if (!s.ok()) return done(s);
        int64_t sum = 0;
        if (!absl::SimpleAtoi(r.kv().value(), &sum)) {
          return done(absl::InternalError(
              absl::StrCat("the coordinator answered a non-number: \"", r.kv().value(), "\"")));
        }
        done(sum);
      });
}

void UpstreamBackend::GetKeyValueDir(const CallContext& call, std::string dir,
                                     Done<std::vector<KeyValueEntry>> done) {
  tf::GetKeyValueDirRequest request;
  request.set_directory_key(dir);
  Send<tf::GetKeyValueDirResponse>(
      call, &Async::GetKeyValueDir, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::GetKeyValueDirResponse& r) {
        if (!s.ok()) return done(s);
        std::vector<KeyValueEntry> entries;
        for (const auto& kv : r.kv()) entries.push_back({kv.key(), kv.value()});
        done(std::move(entries));
      });
}

void UpstreamBackend::DeleteKeyValue(const CallContext& call, std::string key, StatusDone done) {
  tf::DeleteKeyValueRequest request;
  request.set_key(key);
  Send<tf::DeleteKeyValueResponse>(
      call, &Async::DeleteKeyValue, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::DeleteKeyValueResponse&) {
        done(s);
      });
}

void UpstreamBackend::WatchKeys(const CallContext& call, std::string key, int64_t start_revision,
                                std::function<void()> notify,
                                Done<std::shared_ptr<KeyWatch>> started) {
  auto watch = std::make_shared<UpstreamKeyWatch>(
      call.waiter, std::move(key), start_revision, std::move(notify), std::move(started),
      [this](const std::shared_ptr<UpstreamKeyWatch>& w) { HoldWatch(w); },
      [this, waiter = call.waiter] {
        absl::MutexLock lock(&mu_);
        watches_.erase(waiter);
      });
  absl::Status refused;
  bool begin = false;
  {
    absl::MutexLock lock(&mu_);
    if (link_ == Link::kFailed || link_ == Link::kStopped) {
      refused = failure_;
    } else {
      watches_[call.waiter] = watch;
      if (link_ == Link::kConnected) {
        begin = true;
      } else {
        held_watches_.push_back(watch);
      }
    }
  }
  if (!refused.ok()) return watch->End(refused);
  if (begin) watch->Begin(cohort_stub_->async());
}

void UpstreamBackend::GetCoordinatorSnapshot(const CallContext& call,
                                             Done<CoordinatorSnapshot> done) {
  auto messages = std::make_shared<std::pair<v1::GetClusterSnapshotRequest, v1::ClusterSnapshot>>();
  auto op = std::make_shared<Forward>();
  auto* async = cohort_stub_->async();
  op->start = [async, messages](grpc::ClientContext* ctx, std::function<void(grpc::Status)> d) {
    using CohortAsync = v1::Coordinator::StubInterface::async_interface;
    SendVia<v1::ClusterSnapshot, v1::GetClusterSnapshotRequest, CohortAsync>(
        async, &CohortAsync::GetClusterSnapshot, messages, ctx, std::move(d));
  };
  op->response = &messages->second;
  op->messages = messages;
  op->deadline = call.deadline;
  Submit(op, call.waiter,
         [done = std::move(done)](const absl::Status& s, const google::protobuf::Message& m) {
           if (!s.ok()) return done(s);
           done(FromWire(static_cast<const v1::ClusterSnapshot&>(m), absl::Now()));
         });
}

}  // namespace cohort
