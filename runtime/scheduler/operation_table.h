// The task scheduler's operations: the tasks and puts it keeps (those not finished, and the
// finished ones of the history), by id; and the queue of tasks waiting for a worker, in the
// order they are looked at. Durable, but for the queue (FinishRestore makes it again). Not
// thread-safe: the scheduler holds its lock around every call. What happens to an operation is
// the scheduler's; it says when it changed one (Changed, Mutable), for the journal.
#pragma once

#include <cstddef>
#include <deque>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "runtime/scheduler/ids.h"
#include "runtime/scheduler/scheduler_state.h"

namespace cohort::runtime {

class OperationTable {
 public:
  // A new operation, kept from now on, with the next id (never handed out twice). AddPut's puts
  // `object`, which names no operation: the table remembers whose it is.
  Operation& Add();
  Operation& AddPut(ObjectId object);

  // By id; as with a map's [], an unknown id adds an empty entry. Mutable counts as a change.
  Operation& operation(OperationId id) { return operations_[id]; }
  Operation& Mutable(OperationId id) {
    changed_.insert(id);
    return operations_[id];
  }
  // Null when `id` is not kept.
  Operation* Find(OperationId id);
  const Operation* Find(OperationId id) const;
  bool contains(OperationId id) const { return operations_.contains(id); }
  size_t size() const { return operations_.size(); }
  absl::btree_map<OperationId, Operation>& all() { return operations_; }
  const absl::btree_map<OperationId, Operation>& all() const { return operations_; }
  OperationId next_id() const { return next_id_; }
  void Changed(const Operation& op) { changed_.insert(op.id); }

  // Whether a task is queued, assigned or running.
  bool AnyUnfinished() const;
  // Whether the task or put that made object `id` (`producer`, its record's; 0 for a put) is
  // kept.
  bool KeepsMaker(ObjectId id, OperationId producer) const;
  // Drops `id` (kept) for good, and returns the objects it made: its results, or its put.
  std::vector<ObjectId> Forget(OperationId id);

  // The queue. Enqueue puts `op` at its end, queued as of `now`.
  void Enqueue(Operation& op, absl::Time now);
  bool HasQueued() const { return !queue_.empty(); }
  OperationId PopQueued();
  // Puts `waiting` at the queue's front, ahead of what is left in it.
  void PutBack(std::deque<OperationId> waiting);
  const std::deque<OperationId>& queue() const { return queue_; }
  // The queue made again from the operations' states, oldest first (a restart forgets the order
  // retries re-entered it in).
  void RequeueByAge();

  // Durability (SchedulerChanges). TakeChanges adds to `changes` (null: there is no journal)
  // what changed since it was last called, and forgets that. Apply takes `now` as when every
  // operation read back was queued.
  void TakeChanges(SchedulerChanges* changes);
  void Apply(const SchedulerChanges& changes, absl::Time now);
  void Capture(SchedulerChanges* state) const;

 private:
  absl::btree_map<OperationId, Operation> operations_;
  std::deque<OperationId> queue_;
  OperationId next_id_ = 1;
  // The objects of puts whose operation is kept (a put's record names no operation).
  absl::flat_hash_set<ObjectId> kept_puts_;
  // Since TakeChanges.
  absl::btree_set<OperationId> changed_;
  std::vector<OperationId> forgotten_;
};

}  // namespace cohort::runtime
