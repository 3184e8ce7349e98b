// The operations kept, the queue, and their durable form.
#include "runtime/scheduler/operation_table.h"

#include <algorithm>
#include <utility>

namespace cohort::runtime {

Operation& OperationTable::Add() {
  OperationId id = next_id_++;
  Operation& op = Mutable(id);
  op.id = id;
  return op;
}

Operation& OperationTable::AddPut(ObjectId object) {
  Operation& op = Add();
  op.put_object = object;
  kept_puts_.insert(object);
  return op;
}

Operation* OperationTable::Find(OperationId id) {
  auto it = operations_.find(id);
  return it == operations_.end() ? nullptr : &it->second;
}

const Operation* OperationTable::Find(OperationId id) const {
  auto it = operations_.find(id);
  return it == operations_.end() ? nullptr : &it->second;
}

bool OperationTable::AnyUnfinished() const {
  for (const auto& [id, op] : operations_) {
    if (op.state == OpState::kQueued || op.state == OpState::kAssigned ||
        op.state == OpState::kRunning) {
      return true;
    }
  }
  return false;
}

bool OperationTable::KeepsMaker(ObjectId id, OperationId producer) const {
  return producer != 0 ? operations_.contains(producer) : kept_puts_.contains(id);
}

std::vector<ObjectId> OperationTable::Forget(OperationId id) {
  auto it = operations_.find(id);
  std::vector<ObjectId> made = it->second.task.results;
  if (it->second.put_object != 0) {
    made.push_back(it->second.put_object);
    kept_puts_.erase(it->second.put_object);
  }
  operations_.erase(it);
  changed_.erase(id);
  forgotten_.push_back(id);
  return made;
}

void OperationTable::Enqueue(Operation& op, absl::Time now) {
  Changed(op);
  op.state = OpState::kQueued;
  op.worker = 0;
  op.queued_at = now;
  queue_.push_back(op.id);
}

OperationId OperationTable::PopQueued() {
  OperationId id = queue_.front();
  queue_.pop_front();
  return id;
}

void OperationTable::PutBack(std::deque<OperationId> waiting) {
  waiting.insert(waiting.end(), queue_.begin(), queue_.end());
  queue_ = std::move(waiting);
}

void OperationTable::RequeueByAge() {
  queue_.clear();
  for (const auto& [id, op] : operations_) {
    if (op.state == OpState::kQueued) queue_.push_back(id);
  }
}

void OperationTable::TakeChanges(SchedulerChanges* changes) {
  if (changes != nullptr) {
    for (OperationId id : changed_) changes->operations.push_back(operations_.at(id));
    changes->forgotten_operations = std::move(forgotten_);
  }
  changed_.clear();
  forgotten_.clear();
}

void OperationTable::Apply(const SchedulerChanges& changes, absl::Time now) {
  for (Operation op : changes.operations) {
    op.queued_at = now;
    op.finished_seq = 0;
    next_id_ = std::max(next_id_, op.id + 1);
    if (op.put_object != 0) kept_puts_.insert(op.put_object);
    operations_[op.id] = std::move(op);
  }
  // After the operations: what was forgotten since.
  for (OperationId id : changes.forgotten_operations) {
    if (auto it = operations_.find(id); it != operations_.end()) {
      kept_puts_.erase(it->second.put_object);
      operations_.erase(it);
    }
    next_id_ = std::max(next_id_, id + 1);
  }
  if (changes.next_operation.has_value()) next_id_ = std::max(next_id_, *changes.next_operation);
}

void OperationTable::Capture(SchedulerChanges* state) const {
  for (const auto& [id, op] : operations_) state->operations.push_back(op);
  state->next_operation = next_id_;
}

}  // namespace cohort::runtime
