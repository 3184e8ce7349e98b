// The history of finished tasks and puts.
#include "runtime/scheduler/task_history.h"

namespace cohort::runtime {

void TaskHistory::Finished(Operation& op) {
  if (op.finished_seq != 0) return;
  op.finished_seq = ++finish_seq_;
  entries_.emplace_back(op.finished_seq, op.id);
  ++size_;
}

void TaskHistory::Unfinished(Operation& op) {
  if (op.finished_seq == 0) return;
  op.finished_seq = 0;  // its entry is stale from now on
  --size_;
}

void TaskHistory::Restart(absl::btree_map<OperationId, Operation>& operations) {
  entries_.clear();
  size_ = 0;
  for (auto& [id, op] : operations) {
    if (op.state == OpState::kSucceeded || op.state == OpState::kFailed) Finished(op);
  }
}

std::vector<OperationId> TaskHistory::TakePast(
    size_t limit, const absl::btree_map<OperationId, Operation>& operations) {
  std::vector<OperationId> past;
  while (size_ > limit && !entries_.empty()) {
    auto [seq, id] = entries_.front();
    entries_.pop_front();
    auto it = operations.find(id);
    if (it == operations.end() || it->second.finished_seq != seq) continue;  // stale
    --size_;
    past.push_back(id);
  }
  return past;
}

}  // namespace cohort::runtime
