// UpstreamConnection: its channel, start and stop; each call sent upstream (sent, held across
// outages, shared and cancelled, as the reissue policy says); the link thread (probing the
// coordinator, re-establishing, giving up); and the tasks registered through it.
#include "service/proxy/upstream_connection.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_channel.h"
#include "service/proxy/upstream_key_watch.h"
#include "service/proxy/upstream_reissue_policy.h"
#include "service/rpc/status_translation.h"
#include "spdlog/spdlog.h"

namespace cohort {

namespace tf = tensorflow;

UpstreamConnection::UpstreamConnection(UpstreamOptions options)
    : options_(std::move(options)),
      channel_(MakeUpstreamChannel(options_)),
      stub_(tf::CoordinationService::NewStub(channel_)),
      cohort_stub_(v1::Coordinator::NewStub(channel_)),
      link_(options_.address, options_.outage_tolerance),
      session_(absl::StrFormat("%016x", absl::Uniform<uint64_t>(absl::BitGen()))) {}

UpstreamConnection::~UpstreamConnection() {
  Stop(absl::UnavailableError("the sidecar proxy is shutting down"));
  // Every call is over; what still holds one (a context holds the channel) goes now, and
  // the channel last, from this thread (common/grpc_channel.h says why).
  std::vector<Call> forwards;
  std::vector<std::shared_ptr<UpstreamKeyWatch>> watches;
  std::shared_ptr<UpstreamPark> park;
  {
    absl::MutexLock lock(&mu_);
    forwards = calls_.TakeAll();
    watches = calls_.TakeHeldWatches();
    park = link_.TakePark();
  }
  forwards.clear();
  watches.clear();
  park.reset();
  stub_.reset();
  cohort_stub_.reset();
  ReleaseChannel(&channel_);
}

void UpstreamConnection::Start() {
  absl::MutexLock lock(&mu_);
  if (started_ || link_.state() == Link::kStopped) return;
  started_ = true;
  link_thread_ = std::thread([this] { LinkLoop(); });
}

UpstreamConnection::Link UpstreamConnection::link() const {
  absl::MutexLock lock(&mu_);
  return link_.state();
}

bool UpstreamConnection::AwaitLink(Link want, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto reached = [this, want]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return link_.state() == want; };
  return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
}

int64_t UpstreamConnection::reissued_calls() const {
  absl::MutexLock lock(&mu_);
  return calls_.reissued();
}

int64_t UpstreamConnection::waiting_calls() const {
  absl::MutexLock lock(&mu_);
  return calls_.WaitingCalls();
}

int64_t UpstreamConnection::outages() const {
  absl::MutexLock lock(&mu_);
  return link_.outages();
}

int64_t UpstreamConnection::parked_calls() const {
  std::shared_ptr<UpstreamPark> park;
  {
    absl::MutexLock lock(&mu_);
    park = link_.park();
  }
  return park ? static_cast<int64_t>(park->open_calls()) : 0;
}

void UpstreamConnection::SimulateLinkLossForTest() {
  absl::MutexLock lock(&mu_);
  link_.MarkDown();
}

int64_t UpstreamConnection::held_calls() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(calls_.held());
}

uint64_t UpstreamConnection::service_incarnation() const {
  absl::MutexLock lock(&mu_);
  return link_.service_incarnation();
}

WaiterId UpstreamConnection::NewWaiterId() {
  absl::MutexLock lock(&mu_);
  return ++next_waiter_;
}

absl::StatusOr<TaskName> UpstreamConnection::ResolveTask(const std::string& job, int32_t id) const {
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

void UpstreamConnection::Stop(const absl::Status& why) {
  std::vector<Call> live;
  std::vector<std::shared_ptr<UpstreamKeyWatch>> watches;
  std::shared_ptr<UpstreamPark> park;
  {
    absl::MutexLock lock(&mu_);
    if (!link_.Stop(why)) return;
    live = calls_.UnaryAttempts();
    park = link_.TakePark();
    // A blocking call with no callback of ours: safe to cancel under the lock.
    if (probe_context_) probe_context_->TryCancel();
    watches = calls_.TakeWatches();
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
  auto idle = [this]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_.attempts_in_flight() == 0; };
  mu_.Await(absl::Condition(&idle));
}

// ---- One call forwarded: sent, held across outages, shared and cancelled ---------------
//
// Whether a call goes out, is held or fails (the reissue policy's verdict on the link's state)
// is read and acted on under one hold of mu_, with the link and the call table.

void UpstreamConnection::Submit(const Call& op, WaiterId waiter, UpstreamSubscriber subscriber) {
  absl::Status refused;
  UpstreamSubscriber refuse;  // answered at once, outside the lock
  bool issue = false;
  {
    absl::MutexLock lock(&mu_);
    const Call target = calls_.SharedWith(op);
    if (target == op) {
      const CallFate fate = link_.FateOfNewCall(op->options, &refused);
      issue = fate == CallFate::kSend;
      if (fate == CallFate::kHold) calls_.Hold(op);
      if (refused.ok()) calls_.Share(op);
    }
    if (refused.ok()) {
      calls_.Subscribe(target, waiter, std::move(subscriber));
    } else {
      // Never sent: its request id closes now, or it would hold every later request's low
      // mark down (and the coordinator's records of this session) once the link is back.
      calls_.Finish(op);
      refuse = std::move(subscriber);
    }
  }
  if (refuse) {
    refuse(refused, *op->response);
    return;
  }
  if (issue) Issue(op);
}

void UpstreamConnection::Issue(const Call& op) {
  grpc::ClientContext* ctx = nullptr;
  std::shared_ptr<UpstreamPark> park;
  uint64_t park_id = 0;
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    if (op->abandoned || op->finished) return;
    if (link_.state() == Link::kStopped) {
      refused = link_.failure();
    } else {
      if (op->park) park = link_.ParkStream(cohort_stub_.get());
      park_id = calls_.SendAttempt(op, park, session_);
      if (!park) ctx = op->context.get();
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

void UpstreamConnection::OnAttemptDone(const Call& op, const grpc::Status& wire) {
  // Counted out only at the very end: Stop waits for it, and the backend must outlive
  // everything this does (subscribers included).
  auto done = absl::MakeCleanup([this] {
    absl::MutexLock lock(&mu_);
    calls_.AttemptHandled();
  });
  absl::Status status = CoreStatusFromGrpc(wire);
  bool again = false;
  {
    absl::MutexLock lock(&mu_);
    calls_.AttemptAnswered(op);
    if (op->abandoned) return;
    // Sent again, the attempt does not count: it never reached the service.
    again = op->parked_on && link_.ResendsParked(op->parked_on, wire, status);
    if (again) --op->attempts;
  }
  if (again) return Issue(op);
  {
    absl::MutexLock lock(&mu_);
    if (link_.HoldsAfterAttempt(op->options, &status)) return calls_.Hold(op);
  }
  if (op->attempts > 1 && !status.ok() && op->options.reconcile_reissued) {
    op->options.reconcile_reissued(status, [this, op](const absl::Status& s) { Finish(op, s); });
    return;
  }
  Finish(op, status);
}

void UpstreamConnection::Finish(const Call& op, const absl::Status& status) {
  UpstreamCallTable::Subscribers subscribers;
  {
    absl::MutexLock lock(&mu_);
    subscribers = calls_.Finish(op);
  }
  if (status.ok() && !op->options.liveness) {
    finished_calls_.fetch_add(1, std::memory_order_relaxed);
  }
  for (auto& [waiter, subscriber] : subscribers) subscriber(status, *op->response);
}

void UpstreamConnection::Cancel(WaiterId waiter, const absl::Status& status) {
  UpstreamCallTable::Departure left;
  StatusDone poll;
  std::shared_ptr<UpstreamKeyWatch> watch;
  {
    absl::MutexLock lock(&mu_);
    left = calls_.Unsubscribe(waiter);
    if (!left.call) {
      if (std::optional<StatusDone> local = tasks_.TakePoll(waiter)) {
        poll = std::move(*local);
      } else {
        watch = calls_.TakeWatch(waiter);
      }
    }
  }
  if (left.context) left.context->TryCancel();
  if (left.park) left.park->Cancel(left.park_id);
  if (left.subscriber) left.subscriber(status, *left.call->response);
  if (poll) poll(status);
  if (watch) watch->End(status);
}

// ---- The link: probing, re-establishing, giving up -------------------------------------

bool UpstreamConnection::Probe(v1::ClusterSnapshot* snapshot) {
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

void UpstreamConnection::LinkLoop() {
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

bool UpstreamConnection::Reestablish(const v1::ClusterSnapshot& snapshot) {
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
    Send(CallContext{},
         upstream::RegisterTaskAgain(task, task_incarnation,
                                     [this, pending, task = task](const absl::Status& s) {
                                       if (!s.ok() && !IsOutage(s)) {
                                         spdlog::error("proxy: {} could not register again: {}",
                                                       task.ToString(), std::string(s.message()));
                                         absl::MutexLock lock(&mu_);
                                         tasks_.SetHeartbeatError(task, s);
                                       }
                                       absl::MutexLock lock(&pending->mu);
                                       if (IsOutage(s)) pending->outage = true;
                                       --pending->left;
                                     }));
  }
  {
    absl::MutexLock lock(&pending->mu);
    auto done = [&pending]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(pending->mu) { return pending->left == 0; };
    pending->mu.Await(absl::Condition(&done));
    if (pending->outage) return false;
  }

  std::vector<Call> held;
  std::vector<std::shared_ptr<UpstreamKeyWatch>> watches;
  std::vector<std::tuple<TaskName, uint64_t, TaskProgress>> heartbeats;
  std::shared_ptr<UpstreamPark> old_park;
  absl::Duration outage;
  Link was;
  {
    absl::MutexLock lock(&mu_);
    if (link_.state() == Link::kStopped) return false;
    was = link_.state();
    outage = link_.downtime();
    old_park = link_.Connect(incarnation, cohort_stub_.get());
    held = calls_.TakeHeld();
    watches = calls_.TakeHeldWatches();
    for (const auto& [task, task_incarnation] : tasks_.Registered()) {
      heartbeats.emplace_back(task, task_incarnation, tasks_.Progress(task));
    }
  }
  spdlog::info(
      "proxy: coordinator at {} reached (service incarnation {:#x}){}; sending {} "
      "held calls and {} watches",
      options_.address, incarnation,
      was == Link::kDown ? absl::StrCat(" after ", absl::FormatDuration(outage), " away") : "",
      held.size(), watches.size());
  if (old_park) old_park->Shutdown();
  for (const auto& [task, task_incarnation, progress] : heartbeats) {
    ForwardHeartbeat(task, task_incarnation, progress);
  }
  for (const auto& op : held) Issue(op);
  for (const auto& watch : watches) watch->Begin(cohort_stub_->async());
  return true;
}

void UpstreamConnection::ExpireHeld() {
  std::vector<Call> expired;
  absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    expired = calls_.TakeExpired(now);
  }
  for (const auto& op : expired) {
    Finish(op, absl::DeadlineExceededError(
                   "the call's deadline passed while the coordinator was unreachable"));
  }
}

void UpstreamConnection::FailAll(const absl::Status& status) {
  std::vector<Call> held;
  std::vector<std::shared_ptr<UpstreamKeyWatch>> watches;
  std::vector<StatusDone> polls;
  {
    absl::MutexLock lock(&mu_);
    held = calls_.TakeHeld();
    watches = calls_.TakeHeldWatches();
    polls = tasks_.Clear();
  }
  for (const auto& op : held) Finish(op, status);
  for (const auto& watch : watches) watch->End(status);
  for (auto& poll : polls) poll(status);
}

// ---- The tasks registered here: heartbeats answered here, one error poll per task -------

void UpstreamConnection::OnRegistered(const TaskName& as_called, uint64_t incarnation,
                                      uint64_t service_incarnation) {
  {
    absl::MutexLock lock(&mu_);
    link_.set_service_incarnation(service_incarnation);
  }
  // A task that registered before the coordinator was first reached went by the name its
  // client gave (jaxlib's name no job: the coordinator's default job). Its later calls come
  // resolved, so it is kept under its resolved name: else it is not found among the tasks
  // registered here, and its heartbeats are held through an outage instead of answered.
  const TaskName task = ResolveTask(as_called.job, as_called.id).value_or(as_called);
  std::optional<uint64_t> generation;
  {
    absl::MutexLock lock(&mu_);
    generation = tasks_.Register(task, incarnation);
  }
  if (generation) StartTaskPoll(task, *generation);
}

void UpstreamConnection::StartTaskPoll(const TaskName& task, uint64_t generation) {
  // The proxy's own poll: whatever the task's clients do, the coordinator sees one poll
  // per task, and the clients' polls wait here, across outages.
  Send(CallContext{}, upstream::PollForError(task, [this, task, generation](const absl::Status& s) {
         OnTaskPollDone(task, generation, s);
       }));
}

void UpstreamConnection::OnTaskPollDone(const TaskName& task, uint64_t generation,
                                        const absl::Status& status) {
  std::vector<LocalTaskTable::Poll> polls;
  {
    absl::MutexLock lock(&mu_);
    polls = tasks_.PollDone(task, generation, status);
  }
  for (auto& [waiter, poll] : polls) poll(status);
}

void UpstreamConnection::Forget(const TaskName& as_called, const absl::Status& why) {
  const TaskName task = ResolveTask(as_called.job, as_called.id).value_or(as_called);
  std::vector<LocalTaskTable::Poll> polls;
  {
    absl::MutexLock lock(&mu_);
    polls = tasks_.Leave(task);
  }
  // The task's clients' polls end now with `why`, as the coordinator ends the task's own
  // (the same words): waiting for the proxy's poll to be answered is waiting for nothing
  // when that poll reached the coordinator only after the shutdown (it is parked there,
  // for a task that has left).
  for (auto& [waiter, poll] : polls) poll(why);
}

void UpstreamConnection::ForwardHeartbeat(const TaskName& task, uint64_t incarnation,
                                          const TaskProgress& progress) {
  auto request = upstream::Heartbeat(
      task, incarnation, progress, [this, task, incarnation](const absl::Status& s) {
        if (s.ok() || IsOutage(s) || s.code() == absl::StatusCode::kDeadlineExceeded) return;
        absl::MutexLock lock(&mu_);
        tasks_.SetHeartbeatError(task, incarnation, s);
      });
  request.options.fail_fast = true;
  Send(CallContext{0, absl::Now() + options_.heartbeat_deadline}, std::move(request));
}

std::optional<absl::Status> UpstreamConnection::HeartbeatHere(const TaskName& task,
                                                              std::optional<uint64_t> incarnation,
                                                              const TaskProgress& progress) {
  std::optional<LocalTaskTable::LocalHeartbeat> here;
  {
    absl::MutexLock lock(&mu_);
    here = tasks_.HeartbeatHere(link_, task, incarnation, progress);
  }
  if (!here) return std::nullopt;
  if (here->forward) ForwardHeartbeat(task, here->incarnation, here->progress);
  return here->answer;
}

absl::Status UpstreamConnection::CheckIncarnation(const TaskName& task,
                                                  uint64_t incarnation) const {
  absl::MutexLock lock(&mu_);
  return tasks_.CheckIncarnation(task, incarnation);
}

void UpstreamConnection::PollForError(const CallContext& call, const TaskName& task,
                                      StatusDone done) {
  LocalTaskTable::PollPlacement placed;
  {
    absl::MutexLock lock(&mu_);
    placed = tasks_.PlacePoll(link_, task, call.waiter, std::move(done));
  }
  if (!placed.refused.ok()) return placed.done(placed.refused);
  if (placed.forward) return Send(call, upstream::PollForError(task, std::move(placed.done)));
  for (auto& [waiter, poll] : placed.replaced) {
    poll(absl::CancelledError(
        absl::StrCat("a newer error poll of ", task.ToString(), " replaced this one")));
  }
}

absl::Status UpstreamConnection::PropagatedError() const {
  absl::MutexLock lock(&mu_);
  return link_.ended() ? link_.failure() : tasks_.propagated();
}

// ---- Key watches: begun while the link is up, held while it is not ----------------------

void UpstreamConnection::HoldWatch(const std::shared_ptr<UpstreamKeyWatch>& watch) {
  absl::Status failed;
  {
    absl::MutexLock lock(&mu_);
    if (link_.ended()) {
      failed = link_.failure();
    } else {
      // Its stream broke for want of the coordinator: the link is down from here, and the
      // watch resumes with the held calls once it is back (Reestablish).
      link_.MarkDown();
      calls_.HoldWatch(watch);
    }
  }
  if (!failed.ok()) watch->End(failed);
}

void UpstreamConnection::WatchKeys(const CallContext& call, std::string key, int64_t start_revision,
                                   std::function<void()> notify,
                                   CoordinationBackend::Done<std::shared_ptr<KeyWatch>> started) {
  auto watch = std::make_shared<UpstreamKeyWatch>(
      call.waiter, std::move(key), start_revision, std::move(notify), std::move(started),
      [this](const std::shared_ptr<UpstreamKeyWatch>& w) { HoldWatch(w); },
      [this, waiter = call.waiter] {
        absl::MutexLock lock(&mu_);
        calls_.RemoveWatch(waiter);
      });
  absl::Status refused;
  bool begin = false;
  {
    absl::MutexLock lock(&mu_);
    if (link_.ended()) {
      refused = link_.failure();
    } else {
      calls_.AddWatch(call.waiter, watch);
      if (link_.connected()) {
        begin = true;
      } else {
        calls_.HoldWatch(watch);
      }
    }
  }
  if (!refused.ok()) return watch->End(refused);
  if (begin) watch->Begin(cohort_stub_->async());
}

}  // namespace cohort
