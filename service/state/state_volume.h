#pragma once
// The volume that holds --state-dir, as the state store sees it: the reserve file kept on it,
// whether it is full, and the writes to the log that free the reserve when it is. Key-value
// writes are refused while it is full; the changes already made, a restart's first snapshot
// and the small records of tasks and barriers go on into the reserve.

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace cohort {

class StateVolume {
 public:
  // `stopped_within(wait)` waits at most `wait` for the store to stop, and says whether it has:
  // the writes that wait for space and Watch end then.
  StateVolume(std::string dir, int64_t reserve_bytes, absl::Duration check_interval,
              std::function<bool(absl::Duration)> stopped_within);
  StateVolume(const StateVolume&) = delete;
  StateVolume& operator=(const StateVolume&) = delete;

  // Removes the reserve a last run left (this one holds none yet).
  absl::Status RemoveLastReserve();

  // Writes `data` to the log at `offset`, freeing the reserve when the volume is full; with
  // `may_wait`, waits for space once the reserve is spent too (false: stopping, or another
  // error, with errno set). A wait takes the store's lock (StoppedWithin): never with
  // `may_wait` while holding it.
  bool WriteLog(int fd, int64_t offset, absl::string_view data, bool may_wait);
  // Writes zeros from `from` to `to` (room for the log); returns how far it got: the room
  // never takes the reserve, and a full volume leaves the log to grow as it is written.
  static int64_t WriteRoom(int fd, int64_t from, int64_t to);

  bool CheckSpace();  // true: the volume has room again
  // CheckSpace every check interval until the store stops; `on_room` when room returns.
  void Watch(const std::function<void()>& on_room);

  // The volume is full once a write to it fails for want of space (the reserve is freed, and
  // the write goes on into it) or its free space falls below half the reserve; it is no
  // longer once the reserve is allocated again with as much free beside it.
  bool full() const { return full_.load(); }
  absl::Status RoomForValues() const;

  struct Stats {
    bool full = false;
    int64_t free_bytes = -1;  // at the last look (-1: not looked yet)
  };
  Stats GetStats() const;

 private:
  // Frees the reserve (false: none held) and refuses key-value writes from now on.
  bool ReleaseReserve(const std::string& why);
  // The volume is full from now on, for `why` (said in the log and to refused writers).
  void BecameFullLocked(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool MakeReserve();  // allocates the reserve (false: no room)

  const std::string dir_;
  const std::string reserve_path_;
  const int64_t reserve_bytes_;
  const absl::Duration check_interval_;
  const std::function<bool(absl::Duration)> stopped_within_;

  std::atomic<bool> full_{false};
  // Taken after the store's own lock (a write to the log under it may free the reserve),
  // never before it.
  mutable absl::Mutex mu_;
  bool reserve_held_ ABSL_GUARDED_BY(mu_) = false;
  int64_t free_bytes_ ABSL_GUARDED_BY(mu_) = -1;
  std::string full_why_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort
