#include "service/core/key_change_log.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "service/core/key_value_store.h"

namespace cohort {

KeyChangeLog::KeyChangeLog(const KeyValueLimits& limits, ParkedCallRegistry* parked)
    : watch_queue_events_(limits.watch_queue_events),
      watch_queue_bytes_(limits.watch_queue_bytes),
      parked_(parked),
      history_(limits.history_events, limits.history_bytes) {}

absl::Status KeyChangeLog::RoomForValues() const {
  if (journal_ == nullptr) return absl::OkStatus();
  return journal_->RoomForValues();
}

int64_t KeyChangeLog::Advance(bool deleted, const std::string& key, const std::string& value) {
  ++revision_;
  if (journal_ == nullptr) return revision_;
  if (batch_changes_) {
    batch_changes_->push_back({deleted, key, value, revision_});  // copied for the one record
  } else if (deleted) {
    journal_->KeyDeleted(key, revision_);
  } else {
    journal_->KeyPut(key, value, revision_);
  }
  return revision_;
}

void KeyChangeLog::Record(KeyChange event, Reached* reached) {
  auto shared = std::make_shared<const KeyChange>(std::move(event));
  history_.Append(shared);
  for (auto it = watches_.begin(); it != watches_.end();) {
    KeyWatch& watch = **it;
    if (!watch.Matches(shared->key)) {
      ++it;
      continue;
    }
    if (watch.Push(shared, watch_queue_events_, watch_queue_bytes_)) {
      reached->notified.push_back(*it);
      ++it;
      continue;
    }
    // What is queued still goes out; the end tells where to pick up.
    reached->overflowed.emplace_back(*it, shared->revision);
    it = watches_.erase(it);
  }
}

void KeyChangeLog::BeginBatch() { batch_changes_.emplace(); }

void KeyChangeLog::EndBatch() {
  std::vector<KeyJournalChange> changes = std::move(*batch_changes_);
  batch_changes_.reset();
  // Changes are kept only with a journal (Advance).
  if (changes.size() == 1) {
    JournalOne(changes[0]);
  } else if (!changes.empty()) {
    journal_->KeysChanged(changes);
  }
}

void KeyChangeLog::JournalOne(const KeyJournalChange& change) {
  if (change.deleted) {
    journal_->KeyDeleted(change.key, change.revision);
  } else {
    journal_->KeyPut(change.key, change.value, change.revision);
  }
}

absl::Status KeyChangeLog::AddWatch(const std::shared_ptr<KeyWatch>& watch, int64_t start_revision,
                                    bool* replayed) {
  watch->set_gate(journal_);  // its events go out once they are on disk
  if (start_revision > revision_ + 1) {
    return absl::OutOfRangeError(
        absl::StrCat("start revision ", start_revision, " is past the store's revision ", revision_,
                     " (did the coordinator restart?): read the keys again and watch from now"));
  }
  std::vector<KeyChangePtr> past;
  if (start_revision != 0) {
    if (auto s = history_.Since(start_revision, &past); !s.ok()) return s;
  }
  if (auto s = parked_->Add(watch); !s.ok()) return s;
  watch->set_created_revision(revision_);
  for (const KeyChangePtr& event : past) {
    if (!watch->Matches(event->key)) continue;
    // A replay longer than the queue still goes out whole: the client asked for it.
    watch->Push(event, SIZE_MAX, SIZE_MAX);
    *replayed = true;
  }
  watches_.push_back(watch);
  return absl::OkStatus();
}

void KeyChangeLog::RemoveWatch(WaiterId id) {
  watches_.erase(std::remove_if(watches_.begin(), watches_.end(),
                                [id](const auto& watch) { return watch->id() == id; }),
                 watches_.end());
}

void KeyChangeLog::Restart(int64_t revision) {
  revision_ = revision;
  history_.Restart(revision);
}

}  // namespace cohort
