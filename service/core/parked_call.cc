#include "service/core/parked_call.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace cohort {

const char* ParkKindName(ParkKind kind) {
  switch (kind) {
    case ParkKind::kRegister:
      return "register";
    case ParkKind::kWaitForAllTasks:
      return "wait_for_all_tasks";
    case ParkKind::kShutdown:
      return "shutdown";
    case ParkKind::kKeyValueGet:
      return "key_value_get";
    case ParkKind::kBarrier:
      return "barrier";
    case ParkKind::kAliveTasks:
      return "alive_tasks";
    case ParkKind::kPollForError:
      return "poll_for_error";
    case ParkKind::kWatchJobState:
      return "watch_job_state";
    case ParkKind::kWatchKeys:
      return "watch_keys";
    case ParkKind::kTorchStoreWait:
      return "torch_store_wait";
  }
  return "unknown";
}

absl::Status ParkedCallRegistry::Add(const std::shared_ptr<ParkedCall>& call) {
  absl::MutexLock lock(&mu_);
  if (stopped_) return stop_status_;
  if (static_cast<int64_t>(calls_.size()) >= limits_.max_total) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the coordinator already holds ", calls_.size(),
                     " parked calls (limit --max-parked-calls); retry later"));
  }
  if (call->owner()) {
    int& n = per_task_[*call->owner()];
    if (n >= limits_.max_per_task) {
      return absl::ResourceExhaustedError(
          absl::StrCat(call->owner()->ToString(), " already has ", n,
                       " parked calls (limit --max-parked-calls-per-task)"));
    }
    ++n;
  } else if (limits_.max_without_task_per_kind > 0) {
    int64_t& n = without_task_[static_cast<int>(call->kind())];
    if (n >= limits_.max_without_task_per_kind) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the coordinator already holds ", n, " ", ParkKindName(call->kind()),
          " calls that name no task (limit --max-parked-calls-without-task); retry later"));
    }
    ++n;
  }
  counts_[static_cast<int>(call->kind())].fetch_add(1);
  calls_.emplace(call->id(), call);
  return absl::OkStatus();
}

void ParkedCallRegistry::ForgetLocked(ParkedCall& call) {
  call.claimed_ = true;
  counts_[static_cast<int>(call.kind())].fetch_sub(1);
  if (call.owner()) {
    auto it = per_task_.find(*call.owner());
    if (it != per_task_.end() && --it->second == 0) per_task_.erase(it);
  } else if (limits_.max_without_task_per_kind > 0) {
    --without_task_[static_cast<int>(call.kind())];
  }
  calls_.erase(call.id());
}

bool ParkedCallRegistry::Claim(ParkedCall& call) {
  absl::MutexLock lock(&mu_);
  if (call.claimed_) return false;
  // Keep the call alive while we forget it: calls_ may hold the last reference.
  auto it = calls_.find(call.id());
  std::shared_ptr<ParkedCall> keep = it != calls_.end() ? it->second : nullptr;
  ForgetLocked(call);
  return true;
}

void ParkedCallRegistry::Cancel(WaiterId id, const absl::Status& status) {
  std::shared_ptr<ParkedCall> call;
  {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(id);
    if (it == calls_.end() || it->second->claimed_) return;
    call = it->second;
    ForgetLocked(*call);
  }
  call->Unlink();
  call->FinishWithError(status);
}

void ParkedCallRegistry::CancelAll(const absl::Status& status) {
  std::vector<std::shared_ptr<ParkedCall>> calls;
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
    stop_status_ = status;
    for (auto& [id, call] : calls_) calls.push_back(call);
    for (auto& call : calls) ForgetLocked(*call);
  }
  for (auto& call : calls) {
    call->Unlink();
    call->FinishWithError(status);
  }
}

int64_t ParkedCallRegistry::Total() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(calls_.size());
}

}  // namespace cohort
