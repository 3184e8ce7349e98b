// UpstreamBackend: the link to the coordinator (probing, re-establishing, giving up).
#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "service/proxy/upstream_backend.h"
#include "service/proxy/upstream_forward.h"
#include "service/proxy/upstream_key_watch.h"
#include "spdlog/spdlog.h"

namespace cohort {

namespace tf = tensorflow;

void UpstreamBackend::MarkDownLocked() {
  if (link_ != Link::kConnected) return;
  link_ = Link::kDown;
  down_since_ = absl::Now();
  ++outages_;
  spdlog::warn("proxy: lost the coordinator at {}; holding calls for up to {}", options_.address,
               absl::FormatDuration(options_.outage_tolerance));
}

absl::Status UpstreamBackend::OutageError() const {
  return absl::UnavailableError(absl::StrCat(
      "the coordinator at ", options_.address, " has been unreachable for ",
      absl::FormatDuration(absl::Trunc(absl::Now() - down_since_, absl::Milliseconds(1))),
      ", longer than the sidecar proxy's outage tolerance (",
      absl::FormatDuration(options_.outage_tolerance), ")",
      refusal_.ok() ? "" : absl::StrCat("; it refuses the proxy: ", refusal_.ToString())));
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

}  // namespace cohort
