// The outcomes of repeated calls, and their durable form.
#include "runtime/scheduler/call_log.h"

#include <algorithm>

namespace cohort::runtime {

const CallOutcome* CallLog::Repeated(const CallId& call) const {
  if (call.number == 0) return nullptr;
  auto it = calls_.find({call.worker, call.number});
  return it == calls_.end() ? nullptr : &it->second;
}

void CallLog::Remember(const CallId& call, CallOutcome outcome) {
  if (call.number == 0) return;
  if (journaled_) new_calls_.push_back({call.worker, call.number, outcome});
  bool fresh = calls_.insert_or_assign({call.worker, call.number}, std::move(outcome)).second;
  if (!fresh) return;  // read back twice (a snapshot and the log after it)
  std::deque<uint64_t>& order = order_[call.worker];
  order.push_back(call.number);
  while (order.size() > capacity_) {
    calls_.erase({call.worker, order.front()});
    order.pop_front();
  }
}

void CallLog::TakeChanges(SchedulerChanges* changes) {
  if (changes != nullptr) changes->calls = std::move(new_calls_);
  new_calls_.clear();
}

void CallLog::Apply(const SchedulerChanges& changes) {
  for (const RememberedCall& call : changes.calls) {
    Remember({call.worker, call.call}, call.outcome);
  }
}

void CallLog::Capture(SchedulerChanges* state) const {
  std::vector<WorkerId> callers;
  for (const auto& [worker, order] : order_) callers.push_back(worker);
  std::sort(callers.begin(), callers.end());
  for (WorkerId worker : callers) {
    for (uint64_t number : order_.at(worker)) {
      state->calls.push_back({worker, number, calls_.at({worker, number})});
    }
  }
}

}  // namespace cohort::runtime
