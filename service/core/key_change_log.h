#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/key_change.h"
#include "service/core/durable_state.h"
#include "service/core/key_watch.h"
#include "service/core/parked_call.h"

namespace cohort {

struct KeyValueLimits;

// The key-value store's changes in revision order: the revision, the recent events a watch
// resumes from, the watches, and the journal each change is told to before it is acknowledged
// (Atomically's changes as one record). Not thread-safe: the store calls it under its lock,
// and tells the watches it hands back once that lock is released.
class KeyChangeLog {
 public:
  // The watches a change reached.
  struct Reached {
    std::vector<std::shared_ptr<KeyWatch>> notified;
    // Dropped for falling behind, to be ended with the revision to resume from.
    std::vector<std::pair<std::shared_ptr<KeyWatch>, int64_t>> overflowed;
  };

  // `parked`: where watches are registered.
  KeyChangeLog(const KeyValueLimits& limits, ParkedCallRegistry* parked);

  // Bumped by every change; what watches resume from.
  int64_t revision() const { return revision_; }
  // Null: no journal.
  void set_journal(StateJournal* journal) { journal_ = journal; }
  // The journal's word on whether it takes new key-value data (OK without a journal).
  absl::Status RoomForValues() const;

  // Starts the next revision: a put of `value` at `key`, or (`deleted`) the removal of `key`
  // and everything under "key/". Tells the journal, or keeps a copy for the batch's one record;
  // nothing is copied without a journal. Returns the new revision.
  int64_t Advance(bool deleted, const std::string& key, const std::string& value);
  // One event of the current revision: kept for watches that resume, and queued on the
  // watches that match it.
  void Record(KeyChange event, Reached* reached);

  // Between these, changes are kept for one journal record (KeyValueStore::Atomically).
  void BeginBatch();
  void EndBatch();

  // Registers `watch`, and queues the kept events from `start_revision` (0: none) it matches;
  // `replayed`: whether there were any. OUT_OF_RANGE when that revision is no longer kept or
  // not reached yet.
  absl::Status AddWatch(const std::shared_ptr<KeyWatch>& watch, int64_t start_revision,
                        bool* replayed);
  void RemoveWatch(WaiterId id);

  // Starts again from `revision` with nothing kept (a restarted coordinator).
  void Restart(int64_t revision);

 private:
  void JournalOne(const KeyJournalChange& change);

  const size_t watch_queue_events_;
  const size_t watch_queue_bytes_;
  ParkedCallRegistry* const parked_;

  int64_t revision_ = 0;
  KeyEventHistory history_;
  std::vector<std::shared_ptr<KeyWatch>> watches_;
  StateJournal* journal_ = nullptr;
  // While a batch runs: the changes its one record will hold.
  std::optional<std::vector<KeyJournalChange>> batch_changes_;
};

}  // namespace cohort
