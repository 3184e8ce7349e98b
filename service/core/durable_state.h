#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/durability_gate.h"
#include "common/failure_reason.h"
#include "service/core/task_name.h"

namespace cohort {

// The part of the service's state that outlives the process when the coordinator runs with
// --state-dir: what every acknowledged change leaves behind. Parked calls, watches, timers
// and heartbeat times are not in it: they belong to connections, which a restart ends.
//
// The core knows no files: it tells a StateJournal about each change as it makes it, can
// capture the whole of this state at any time (for a snapshot), and starts from one
// (service/state/ reads and writes them).

struct DurableTask {
  TaskName task;
  TaskState state = TaskState::kDisconnected;
  uint64_t incarnation = 0;
  bool ever_registered = false;
  absl::Status error;  // set in kError
  // Why it is in error; kUnspecified in state written before reasons were kept.
  FailureReason reason = FailureReason::kUnspecified;
  std::string reset_request;  // FormatRequestId of the ResetTask that last reset it, if any
};

enum class WholeBarrierKind { kRegister, kShutdown };

struct DurableWholeBarrier {
  // 0 idle, 1 open, 2 passed, 3 failed (WholeJobBarrier::State).
  int state = 0;
  absl::Status result;
  std::vector<TaskName> waiting;  // sorted
};

struct DurableBarrier {
  std::string id;
  int64_t counter = 0;
  bool done = false;
  absl::Status result;
  // Empty with `all_workload` set: every workload task (the default set).
  bool all_workload = false;
  std::vector<TaskName> participants;  // sorted
  std::vector<TaskName> arrived;       // sorted
  absl::Duration timeout;
};

struct DurableDeviceGroup {
  std::vector<TaskName> members;  // sorted
  absl::Status error;
  std::vector<std::string> payloads;  // in member order, when `error` is OK
};

struct DurableKey {
  std::string key;
  std::string value;
};

// One change of a key as the journal hears of it (KeyPut, KeyDeleted).
struct KeyJournalChange {
  bool deleted = false;  // KeyDeleted: the key and every key under "key/"
  std::string key;
  std::string value;  // a put's
  int64_t revision = 0;
};

struct DurableState {
  uint64_t service_incarnation = 0;
  std::vector<DurableTask> tasks;
  DurableWholeBarrier register_barrier;
  DurableWholeBarrier shutdown_barrier;
  absl::Status first_error;
  std::vector<DurableKey> keys;
  int64_t key_revision = 0;
  std::vector<DurableBarrier> barriers;
  std::vector<DurableDeviceGroup> device_groups;  // finished exchanges only
};

// Told about every change to DurableState, in the order the changes are made, before the
// change is acknowledged to anyone. Calls come from under the lock of the part that changes
// (service, key-value store, barrier table), so an implementation must not call back into
// the service. An implementation that cannot record a change must not return normally
// (the change would be acknowledged and then lost): it ends the process. As a
// DurabilityGate it holds back the answers that follow the changes until they are on disk.
class StateJournal : public DurabilityGate {
 public:
  virtual ~StateJournal() = default;

  // OK while the journal can take new key-value data. RESOURCE_EXHAUSTED, saying why, while
  // its volume is full: key-value writes are then refused before they change anything (the
  // small records of tasks, barriers and deletions still go on, into space held in reserve).
  virtual absl::Status RoomForValues() const { return absl::OkStatus(); }

  virtual void TaskChanged(const DurableTask& task) = 0;
  // The barrier's state and result; `waiting` in the argument is ignored (see below).
  virtual void WholeBarrierChanged(WholeBarrierKind kind, const DurableWholeBarrier& barrier) = 0;
  virtual void WholeBarrierWaiting(WholeBarrierKind kind, const TaskName& task, bool waiting) = 0;
  virtual void FirstError(const absl::Status& error) = 0;
  // A device exchange finished (`group` set), or its result was dropped (`group` null).
  virtual void DeviceGroupChanged(const std::vector<TaskName>& members,
                                  const DurableDeviceGroup* group) = 0;

  virtual void KeyPut(const std::string& key, const std::string& value, int64_t revision) = 0;
  // Removes `key` and every key under "key/".
  virtual void KeyDeleted(const std::string& key, int64_t revision) = 0;
  // Changes made together (KeyValueStore::Atomically), in order: restored all or none.
  virtual void KeysChanged(const std::vector<KeyJournalChange>& changes) = 0;

  // A new instance of a named barrier (none arrived yet); it replaces the id's earlier one.
  virtual void BarrierStarted(const DurableBarrier& barrier) = 0;
  virtual void BarrierArrived(const std::string& id, int64_t counter, const TaskName& task) = 0;
  virtual void BarrierDone(const std::string& id, int64_t counter, const absl::Status& result) = 0;
  // A finished barrier's id is forgotten (BarrierLimits): its next caller starts it afresh.
  virtual void BarrierForgotten(const std::string& id) = 0;
};

}  // namespace cohort
