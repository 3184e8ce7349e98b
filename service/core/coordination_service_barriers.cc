// CoordinationService: the named barriers of the barrier table (Barrier, CancelBarrier).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "service/core/coordination_service.h"
#include "service/core/errors.h"
#include "spdlog/spdlog.h"

namespace cohort {

// ---- Named barriers ------------------------------------------------------------------

void CoordinationService::Barrier(const std::string& id, int64_t counter, absl::Duration timeout,
                                  const TaskName& caller, std::vector<TaskName> tasks,
                                  WaiterId waiter, Done<int64_t> done) {
  BarrierArrival arrival{id, counter, timeout, caller, jobs_.workload()};
  const bool explicit_tasks = !tasks.empty();
  if (explicit_tasks) {
    std::sort(tasks.begin(), tasks.end());
    tasks.erase(std::unique(tasks.begin(), tasks.end()), tasks.end());
    arrival.participants = std::make_shared<const std::vector<TaskName>>(std::move(tasks));
  }
  {
    absl::ReaderMutexLock lock(&mu_);
    if (stopped_) {
      return done(ServiceError(absl::UnavailableError("the coordination service is stopping")));
    }
    if (auto bad = CheckBarrierId(id, config_.barriers); !bad.ok()) {
      return done(ServiceError(bad));
    }
    const TaskRecord* task = tasks_.Find(caller);
    if (!task) return done(tasks_.Get(caller).status());
    // A task that is not registered has no say in the job's barriers (a restarted
    // coordinator still hears the tasks it restored, within their grace period).
    if (task->state == TaskState::kDisconnected && !heartbeats_.InGrace(*task, clock_->Now())) {
      return done(ServiceError(
          absl::FailedPreconditionError(absl::StrCat(caller.ToString(), " called barrier \"", id,
                                                     "\" but is not registered; register first"))));
    }
    // The default list is the service's own; only a caller's list needs checking.
    for (const TaskName& t : explicit_tasks ? *arrival.participants : std::vector<TaskName>{}) {
      if (!tasks_.Find(t)) {
        return done(ServiceError(absl::InvalidArgumentError(
            absl::StrCat("barrier \"", id, "\" names unknown task ", t.ToString()))));
      }
    }
  }
  auto health = [this](const TaskName& t) {
    absl::ReaderMutexLock lock(&mu_);
    return tasks_.Health(t);
  };
  bool started = barriers_.Arrive(arrival, waiter, health, std::move(done));
  if (started) {
    // A participant may have failed between the check above and the barrier's start; its
    // FailTask would then have found no barrier to fail.
    for (const TaskName& t : *arrival.participants) {
      absl::Status s = health(t);
      if (!s.ok()) barriers_.FailTask(t, s);
    }
  }
}

absl::Status CoordinationService::CancelBarrier(const std::string& id, int64_t counter,
                                                const TaskName& caller,
                                                const std::string& request) {
  if (auto bad = CheckBarrierId(id, config_.barriers); !bad.ok()) return ServiceError(bad);
  {
    absl::ReaderMutexLock lock(&mu_);
    if (!tasks_.Find(caller)) return tasks_.Get(caller).status();
  }
  return barriers_.Cancel(id, counter, caller, request);
}

}  // namespace cohort
