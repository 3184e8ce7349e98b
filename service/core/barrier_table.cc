#include "service/core/barrier_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "service/core/errors.h"
#include "spdlog/spdlog.h"

namespace cohort {

struct BarrierTable::Instance {
  std::string id;
  int64_t counter = 0;
  absl::Time started;
  absl::Time deadline;
  absl::Duration timeout;
  std::shared_ptr<const std::vector<TaskName>> participants;  // sorted
  absl::btree_set<TaskName> arrived;
  std::vector<std::shared_ptr<Call>> calls;
  TimerQueue::TimerId timer = 0;
  bool done = false;
  absl::Status result;
  uint64_t finished_sequence = 0;  // in BarrierTable::finished_ while done and kept
  absl::Time finished_at;
};

namespace {

std::string TaskList(const std::vector<TaskName>& tasks, size_t limit = 10) {
  std::vector<std::string> names;
  for (size_t i = 0; i < tasks.size() && i < limit; ++i) names.push_back(tasks[i].ToString());
  std::string out = absl::StrJoin(names, ", ");
  if (tasks.size() > limit) absl::StrAppend(&out, " and ", tasks.size() - limit, " more");
  return out;
}

bool Contains(const std::vector<TaskName>& sorted, const TaskName& task) {
  return std::binary_search(sorted.begin(), sorted.end(), task);
}

absl::Status BarrierStatus(absl::Status status, const std::string& id, int64_t counter) {
  return WithBarrierError(std::move(status), {id, counter});
}

}  // namespace

absl::Status CheckBarrierId(const std::string& id, const BarrierLimits& limits) {
  if (id.empty()) return absl::InvalidArgumentError("barrier id must not be empty");
  if (id.size() > limits.max_id_bytes) {
    size_t shown = std::min<size_t>(64, id.size());
    while (shown > 0 && (static_cast<unsigned char>(id[shown]) & 0xC0) == 0x80) --shown;
    return absl::InvalidArgumentError(absl::StrCat(
        "barrier id is ", id.size(), " bytes, more than the coordinator's limit of ",
        limits.max_id_bytes, " (--max-barrier-id-bytes); it starts \"", id.substr(0, shown), "\""));
  }
  return absl::OkStatus();
}

BarrierTable::BarrierTable(const Clock* clock, ParkedCallRegistry* parked, TimerQueue* timers,
                           BarrierObserver* observer, BarrierLimits limits)
    : clock_(clock), parked_(parked), timers_(timers), observer_(observer), limits_(limits) {}

void BarrierTable::RememberFinishedLocked(Instance& barrier) {
  barrier.finished_sequence = ++finish_sequence_;
  barrier.finished_at = clock_->Now();
  finished_.emplace(barrier.finished_sequence, barrier.id);
}

void BarrierTable::UnrememberLocked(Instance& barrier) {
  if (barrier.finished_sequence) finished_.erase(barrier.finished_sequence);
  barrier.finished_sequence = 0;
}

void BarrierTable::ForgetFinishedLocked() {
  const absl::Time cutoff = clock_->Now() - limits_.finished_retention;
  while (!finished_.empty()) {
    auto oldest = finished_.begin();
    auto it = barriers_.find(oldest->second);
    if (finished_.size() <= limits_.max_finished && it != barriers_.end() &&
        it->second->finished_at > cutoff) {
      break;
    }
    if (it != barriers_.end()) {
      barriers_.erase(it);
      if (journal_) journal_->BarrierForgotten(oldest->second);
    }
    finished_.erase(oldest);
  }
}

size_t BarrierTable::NumOpen() const {
  absl::MutexLock lock(&mu_);
  return barriers_.size() - finished_.size();
}

size_t BarrierTable::NumFinished() const {
  absl::MutexLock lock(&mu_);
  return finished_.size();
}

std::shared_ptr<BarrierTable::Instance> BarrierTable::StartLocked(const BarrierArrival& arrival) {
  auto barrier = std::make_shared<Instance>();
  barrier->id = arrival.id;
  barrier->counter = arrival.counter;
  barrier->started = clock_->Now();
  barrier->deadline = barrier->started + arrival.timeout;
  barrier->timeout = arrival.timeout;
  barrier->participants = arrival.participants;
  std::shared_ptr<Instance>& slot = barriers_[arrival.id];
  if (slot) UnrememberLocked(*slot);
  slot = barrier;
  if (journal_) {
    DurableBarrier record;
    record.id = arrival.id;
    record.counter = arrival.counter;
    record.timeout = arrival.timeout;
    record.all_workload = arrival.participants == workload_;
    if (!record.all_workload) record.participants = *arrival.participants;
    journal_->BarrierStarted(record);
  }
  std::string id = arrival.id;
  int64_t counter = arrival.counter;
  barrier->timer =
      timers_->Schedule(barrier->deadline, [this, id, counter] { OnTimeout(id, counter); });
  return barrier;
}

std::vector<std::shared_ptr<BarrierTable::Call>> BarrierTable::PassLocked(
    Instance& barrier, const absl::Status& result) {
  barrier.done = true;
  barrier.result = result.ok() ? result : BarrierStatus(result, barrier.id, barrier.counter);
  RememberFinishedLocked(barrier);
  if (journal_) journal_->BarrierDone(barrier.id, barrier.counter, barrier.result);
  if (barrier.timer) timers_->Cancel(barrier.timer);
  absl::Duration open_for = clock_->Now() - barrier.started;
  if (result.ok()) {
    spdlog::debug("barrier {}#{} passed: {} in {}", barrier.id, barrier.counter,
                  Plural(static_cast<long long>(barrier.participants->size()), "task"),
                  absl::FormatDuration(open_for));
  } else {
    spdlog::warn("barrier {}#{} failed after {} with {} of {} arrived: {}", barrier.id,
                 barrier.counter, absl::FormatDuration(open_for), barrier.arrived.size(),
                 barrier.participants->size(), std::string(result.message()));
  }
  if (observer_) {
    observer_->OnBarrierDone(barrier.id, barrier.counter, barrier.result,
                             clock_->Now() - barrier.started);
  }
  return std::move(barrier.calls);
}

void BarrierTable::FinishCalls(std::vector<std::shared_ptr<Call>>& calls,
                               const absl::StatusOr<int64_t>& result) {
  for (auto& call : calls) {
    if (parked_->Claim(*call)) call->Finish(result);
  }
}

bool BarrierTable::Arrive(const BarrierArrival& arrival, WaiterId waiter, const TaskHealth& health,
                          Done done) {
  bool started = false;
  std::vector<std::shared_ptr<Call>> duplicates;
  auto call = std::make_shared<Call>(waiter, ParkKind::kBarrier, arrival.caller, std::move(done));
  std::vector<std::shared_ptr<Call>> finished;
  absl::StatusOr<int64_t> answer = absl::UnknownError("unset");
  bool parked = false;
  {
    absl::MutexLock lock(&mu_);
    ForgetFinishedLocked();
    auto it = barriers_.find(arrival.id);
    std::shared_ptr<Instance> barrier = it == barriers_.end() ? nullptr : it->second;

    // An id the table does not know (new, or forgotten) starts at the instance its caller names.
    int64_t expected = !barrier        ? arrival.counter
                       : barrier->done ? barrier->counter + 1
                                       : barrier->counter;
    const bool starts = !barrier || barrier->done;
    if (barrier && barrier->done && arrival.counter == barrier->counter) {
      // A repeated call for an instance that is over: its cached result.
      answer = barrier->result.ok() ? absl::StatusOr<int64_t>(barrier->counter)
                                    : absl::StatusOr<int64_t>(barrier->result);
    } else if (arrival.counter != expected) {
      absl::Status mismatch = BarrierStatus(
          absl::InternalError(
              absl::StrCat("barrier \"", arrival.id, "\" was called by ", arrival.caller.ToString(),
                           " for instance ", arrival.counter, " but the service expects instance ",
                           expected, ": the tasks disagree on how often this barrier was used")),
          arrival.id, barrier ? barrier->counter : 0);
      answer = mismatch;
      if (!barrier->done) {
        finished = PassLocked(*barrier, mismatch);
        answer = barrier->result;
      }
    } else if (starts && barriers_.size() - finished_.size() >= limits_.max_open) {
      answer = absl::ResourceExhaustedError(absl::StrCat(
          "barrier \"", arrival.id, "\" cannot start: ", limits_.max_open,
          " barriers are open, the coordinator's limit (--max-open-barriers); retry after some "
          "of them passed"));
    } else {
      if (starts) {
        barrier = StartLocked(arrival);
        started = true;
      }
      absl::Status failure;
      if (barrier->participants != arrival.participants &&
          *barrier->participants != *arrival.participants) {
        failure = absl::InvalidArgumentError(absl::StrCat(
            "barrier \"", arrival.id, "\": ", arrival.caller.ToString(),
            " named different tasks than the first caller (", TaskList(*arrival.participants),
            " vs ", TaskList(*barrier->participants), ")"));
      } else if (!Contains(*barrier->participants, arrival.caller)) {
        failure = absl::InvalidArgumentError(absl::StrCat(
            "barrier \"", arrival.id, "\": ", arrival.caller.ToString(),
            " is not one of its participants (", TaskList(*barrier->participants), ")"));
      } else if (started) {
        for (const TaskName& task : *barrier->participants) {
          absl::Status s = health(task);
          if (!s.ok()) {
            failure = absl::InternalError(absl::StrCat("barrier \"", arrival.id,
                                                       "\" failed: participant ", task.ToString(),
                                                       " is unavailable: ", s.message()));
            break;
          }
        }
      }
      if (!failure.ok()) {
        finished = PassLocked(*barrier, failure);
        answer = barrier->result;
      } else {
        // A task calling again replaces its earlier call, whose caller has likely gone. It is
        // claimed now, so that the new call may take its place under the parked-call limits.
        for (auto& earlier : barrier->calls) {
          if (earlier->owner() == arrival.caller && parked_->Claim(*earlier)) {
            duplicates.push_back(earlier);
          }
        }
        if (!duplicates.empty()) {
          barrier->calls.erase(
              std::remove_if(barrier->calls.begin(), barrier->calls.end(),
                             [&](const auto& c) { return c->owner() == arrival.caller; }),
              barrier->calls.end());
        }
        call->set_unlink([this, id = arrival.id, waiter] { RemoveWaiter(id, waiter); });
        absl::Status admitted = parked_->Add(call);
        if (!admitted.ok()) {
          answer = admitted;
        } else {
          parked = true;
          barrier->calls.push_back(call);
          if (barrier->arrived.insert(arrival.caller).second && journal_) {
            journal_->BarrierArrived(barrier->id, barrier->counter, arrival.caller);
          }
          if (barrier->arrived.size() == barrier->participants->size()) {
            finished = PassLocked(*barrier, absl::OkStatus());
            answer = barrier->counter;
          }
        }
      }
    }
    ForgetFinishedLocked();
  }
  for (auto& earlier : duplicates) {
    earlier->Finish(absl::CancelledError(
        absl::StrCat("barrier \"", arrival.id, "\": ", arrival.caller.ToString(),
                     " called again; this earlier call is cancelled")));
  }
  if (!finished.empty()) {
    FinishCalls(finished, answer);
  }
  if (!parked) call->Finish(answer);
  return started;
}

void BarrierTable::RemoveWaiter(const std::string& id, WaiterId waiter) {
  // A caller that went away no longer waits, but its arrival still counts: the other
  // participants saw it reach the barrier.
  absl::MutexLock lock(&mu_);
  auto it = barriers_.find(id);
  if (it == barriers_.end()) return;
  auto& calls = it->second->calls;
  calls.erase(std::remove_if(calls.begin(), calls.end(),
                             [waiter](const auto& c) { return c->id() == waiter; }),
              calls.end());
}

absl::Status BarrierTable::Cancel(const std::string& id, int64_t counter, const TaskName& caller,
                                  const std::string& request) {
  std::vector<std::shared_ptr<Call>> finished;
  absl::Status cancelled;
  {
    absl::MutexLock lock(&mu_);
    ForgetFinishedLocked();
    auto it = barriers_.find(id);
    std::shared_ptr<Instance> barrier = it == barriers_.end() ? nullptr : it->second;
    if (barrier && barrier->done && barrier->counter == counter && !request.empty() &&
        barrier->result.GetPayload(kCancelRequestPayload) == absl::Cord(request)) {
      return absl::OkStatus();  // this request's first attempt ended it
    }
    if (barrier && barrier->done && barrier->counter >= counter) {
      return absl::FailedPreconditionError(
          absl::StrCat("barrier \"", id, "\" instance ", barrier->counter, " already ",
                       barrier->result.ok() ? "passed" : "failed", "; nothing to cancel"));
    }
    // Only the open instance, or the next one to open, can be cancelled.
    int64_t expected = !barrier ? counter : barrier->done ? barrier->counter + 1 : barrier->counter;
    if (counter != expected) {
      return absl::FailedPreconditionError(absl::StrCat("barrier \"", id,
                                                        "\" cannot cancel instance ", counter,
                                                        ": the next instance is ", expected));
    }
    if ((!barrier || barrier->done) && barriers_.size() - finished_.size() >= limits_.max_open) {
      return absl::ResourceExhaustedError(
          absl::StrCat("barrier \"", id, "\" cannot be cancelled ahead: ", limits_.max_open,
                       " barriers are open, the coordinator's limit (--max-open-barriers)"));
    }
    if (!barrier || barrier->done) {
      // Cancelled before anyone arrived: later callers of this instance are told so.
      BarrierArrival arrival{id, counter, absl::ZeroDuration(), caller,
                             std::make_shared<const std::vector<TaskName>>()};
      barrier = StartLocked(arrival);
    }
    cancelled = absl::CancelledError(
        absl::StrCat("barrier \"", id, "\" was cancelled by ", caller.ToString()));
    // Kept with the result, in the state log too (protocols send only their own payloads).
    if (!request.empty()) cancelled.SetPayload(kCancelRequestPayload, absl::Cord(request));
    finished = PassLocked(*barrier, cancelled);
    cancelled = barrier->result;
    ForgetFinishedLocked();
  }
  FinishCalls(finished, cancelled);
  return absl::OkStatus();
}

void BarrierTable::OnTimeout(const std::string& id, int64_t counter) {
  std::vector<std::shared_ptr<Call>> finished;
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    auto it = barriers_.find(id);
    if (it == barriers_.end()) return;
    Instance& barrier = *it->second;
    if (barrier.done || barrier.counter != counter) return;
    std::vector<TaskName> missing;
    for (const TaskName& t : *barrier.participants) {
      if (!barrier.arrived.count(t)) missing.push_back(t);
    }
    finished = PassLocked(
        barrier,
        absl::DeadlineExceededError(absl::StrCat(
            "barrier \"", id, "\" timed out after ",
            absl::FormatDuration(barrier.deadline - barrier.started), " with ", missing.size(),
            " of ", barrier.participants->size(), " tasks missing: ", TaskList(missing))));
    error = barrier.result;
    ForgetFinishedLocked();  // `barrier` may go with it
  }
  FinishCalls(finished, error);
}

void BarrierTable::FailTask(const TaskName& task, const absl::Status& error) {
  std::vector<std::pair<std::vector<std::shared_ptr<Call>>, absl::Status>> failed;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, barrier] : barriers_) {
      if (barrier->done || !Contains(*barrier->participants, task)) continue;
      auto calls = PassLocked(*barrier, absl::InternalError(absl::StrCat(
                                            "barrier \"", id, "\" failed: participant ",
                                            task.ToString(), " failed: ", error.message())));
      failed.emplace_back(std::move(calls), barrier->result);
    }
    ForgetFinishedLocked();
  }
  for (auto& [calls, status] : failed) FinishCalls(calls, status);
}

void BarrierTable::FailAll(const absl::Status& error) {
  std::vector<std::pair<std::vector<std::shared_ptr<Call>>, absl::Status>> failed;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, barrier] : barriers_) {
      if (barrier->done) continue;
      auto calls = PassLocked(*barrier, error);
      failed.emplace_back(std::move(calls), barrier->result);
    }
    ForgetFinishedLocked();
  }
  for (auto& [calls, status] : failed) FinishCalls(calls, status);
}

void BarrierTable::set_journal(StateJournal* journal,
                               std::shared_ptr<const std::vector<TaskName>> workload) {
  absl::MutexLock lock(&mu_);
  journal_ = journal;
  workload_ = std::move(workload);
}

void BarrierTable::Restore(const std::vector<DurableBarrier>& barriers) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  for (const DurableBarrier& record : barriers) {
    auto barrier = std::make_shared<Instance>();
    barrier->id = record.id;
    barrier->counter = record.counter;
    barrier->started = now;
    barrier->timeout = record.timeout;
    barrier->deadline = now + record.timeout;
    barrier->participants =
        record.all_workload ? workload_
                            : std::make_shared<const std::vector<TaskName>>(record.participants);
    barrier->arrived.insert(record.arrived.begin(), record.arrived.end());
    barrier->done = record.done;
    barrier->result = record.result;
    if (!barrier->done) {
      std::string id = record.id;
      int64_t counter = record.counter;
      barrier->timer =
          timers_->Schedule(barrier->deadline, [this, id, counter] { OnTimeout(id, counter); });
    }
    std::shared_ptr<Instance>& slot = barriers_[record.id];
    if (slot) UnrememberLocked(*slot);
    slot = std::move(barrier);
    if (slot->done) RememberFinishedLocked(*slot);
  }
}

std::vector<DurableBarrier> BarrierTable::Capture() const {
  std::vector<DurableBarrier> out;
  absl::MutexLock lock(&mu_);
  out.reserve(barriers_.size());
  for (const auto& [id, barrier] : barriers_) {
    DurableBarrier record;
    record.id = id;
    record.counter = barrier->counter;
    record.done = barrier->done;
    record.result = barrier->result;
    record.timeout = barrier->timeout;
    record.all_workload = barrier->participants == workload_;
    if (!record.all_workload) record.participants = *barrier->participants;
    record.arrived.assign(barrier->arrived.begin(), barrier->arrived.end());
    out.push_back(std::move(record));
  }
  return out;
}

std::vector<BarrierSnapshot> BarrierTable::OpenBarriers() const {
  std::vector<BarrierSnapshot> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, barrier] : barriers_) {
    if (barrier->done) continue;
    BarrierSnapshot snap{id, barrier->counter, barrier->started, barrier->deadline, {}, {}};
    for (const TaskName& t : *barrier->participants) {
      (barrier->arrived.count(t) ? snap.arrived : snap.missing).push_back(t);
    }
    out.push_back(std::move(snap));
  }
  std::sort(out.begin(), out.end(),
            [](const BarrierSnapshot& a, const BarrierSnapshot& b) { return a.id < b.id; });
  return out;
}

}  // namespace cohort
