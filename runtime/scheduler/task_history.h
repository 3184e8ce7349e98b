// The history of finished tasks and puts (TaskScheduler, "History"): the order they finished in,
// so that the oldest past --task-history are forgotten. A task that runs again (a rebuild) gives
// up its place, and takes a new one when it finishes again. Transient: a restart makes it again
// from the operations kept, oldest first by id. Not thread-safe: the scheduler holds its lock
// around every call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "runtime/scheduler/ids.h"
#include "runtime/scheduler/scheduler_state.h"

namespace cohort::runtime {

class TaskHistory {
 public:
  // `op` finished: a place at the end (none if it has one). Sets op.finished_seq.
  void Finished(Operation& op);
  // `op` runs again: its place given up. Clears op.finished_seq.
  void Unfinished(Operation& op);
  // The operations in the history.
  size_t size() const { return size_; }
  // After a restart: the finished operations of `operations`, oldest first by id (a restart
  // forgets the order they finished in).
  void Restart(absl::btree_map<OperationId, Operation>& operations);
  // Gives up the oldest places until at most `limit` are left, and returns the operations that
  // held them, oldest first: they are to be forgotten. `operations`: those kept.
  std::vector<OperationId> TakePast(size_t limit,
                                    const absl::btree_map<OperationId, Operation>& operations);

 private:
  // Oldest first, as (finished_seq, id); an entry whose operation's finished_seq differs is
  // stale (it ran again). size_: the entries not stale.
  std::deque<std::pair<uint64_t, OperationId>> entries_;
  size_t size_ = 0;
  uint64_t finish_seq_ = 0;
};

}  // namespace cohort::runtime
