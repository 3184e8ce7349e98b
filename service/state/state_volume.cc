// The volume of --state-dir: the reserve, the full state, and writes that may find no space.
#include "service/state/state_volume.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "service/state/state_store_internal.h"
#include "spdlog/spdlog.h"

namespace cohort {

StateVolume::StateVolume(std::string dir, int64_t reserve_bytes, absl::Duration check_interval,
                         std::function<bool(absl::Duration)> stopped_within)
    : dir_(std::move(dir)),
      reserve_path_(absl::StrCat(dir_, "/reserve")),
      reserve_bytes_(reserve_bytes),
      check_interval_(check_interval),
      stopped_within_(std::move(stopped_within)) {}

absl::Status StateVolume::RemoveLastReserve() {
  if (::unlink(reserve_path_.c_str()) != 0 && errno != ENOENT) {
    return absl::FailedPreconditionError(
        state_store_internal::Errno("cannot remove", reserve_path_));
  }
  return absl::OkStatus();
}

bool StateVolume::WriteLog(int fd, int64_t offset, absl::string_view data, bool may_wait) {
  bool waited = false;
  while (!data.empty()) {
    ssize_t n = ::pwrite(fd, data.data(), data.size(), offset);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      offset += n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || errno != ENOSPC) return false;
    // A partial write left its part in the file: the rest follows it.
    if (ReleaseReserve("a write to the state log found no space")) continue;
    if (!may_wait) {
      errno = ENOSPC;
      return false;
    }
    if (!waited) {
      spdlog::error(
          "the volume of --state-dir {} is full and its reserve spent: {} bytes of "
          "changes wait for space, and their answers with them",
          dir_, data.size());
      waited = true;
    }
    if (stopped_within_(check_interval_)) {
      errno = ENOSPC;
      return false;
    }
  }
  if (waited) spdlog::info("the volume of --state-dir {} has room again", dir_);
  return true;
}

int64_t StateVolume::WriteRoom(int fd, int64_t from, int64_t to) {
  static const std::string* const kZeros = new std::string(size_t{64} << 10, '\0');
  while (from < to) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(to - from, kZeros->size()));
    const ssize_t wrote = ::pwrite(fd, kZeros->data(), n, from);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) break;
    from += wrote;
  }
  return from;
}

void StateVolume::BecameFullLocked(const std::string& why) {
  full_why_ = why;
  full_ = true;
  spdlog::error(
      "the volume of --state-dir {} is full ({}): key-value writes are refused with "
      "RESOURCE_EXHAUSTED until space returns; reads, barriers and task state go on",
      dir_, why);
}

bool StateVolume::ReleaseReserve(const std::string& why) {
  absl::MutexLock lock(&mu_);
  if (!full_.load()) BecameFullLocked(why);
  if (!reserve_held_) return false;
  reserve_held_ = false;
  ::unlink(reserve_path_.c_str());
  spdlog::warn("--state-dir {}: its reserve of {} bytes freed for the changes already made", dir_,
               reserve_bytes_);
  return true;
}

bool StateVolume::MakeReserve() {
  int fd = ::open(reserve_path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  // Blocks allocated, nothing written: the file holds the room until it is removed.
  int error = ::posix_fallocate(fd, 0, reserve_bytes_);
  ::close(fd);
  if (error != 0) ::unlink(reserve_path_.c_str());
  return error == 0;
}

bool StateVolume::CheckSpace() {
  struct statvfs vs {};
  if (::statvfs(dir_.c_str(), &vs) != 0) return false;
  int64_t free = static_cast<int64_t>(vs.f_bavail) * static_cast<int64_t>(vs.f_frsize);
  absl::MutexLock lock(&mu_);
  free_bytes_ = free;
  if (!full_.load()) {
    if (!reserve_held_ && MakeReserve()) {
      reserve_held_ = true;
      free_bytes_ = free = std::max<int64_t>(0, free - reserve_bytes_);
    }
    if (reserve_held_ && free >= reserve_bytes_ / 2) return false;
    BecameFullLocked(reserve_held_ ? absl::StrCat(free, " bytes free") : "no room for its reserve");
    return false;
  }
  // Full: back once the reserve is whole again with as much free beside it.
  if (free < (reserve_held_ ? reserve_bytes_ : 2 * reserve_bytes_)) return false;
  if (!reserve_held_ && !MakeReserve()) return false;
  reserve_held_ = true;
  full_ = false;
  spdlog::info(
      "the volume of --state-dir {} has room again ({} bytes free): key-value writes "
      "are accepted",
      dir_, free);
  return true;
}

void StateVolume::Watch(const std::function<void()>& on_room) {
  while (!stopped_within_(check_interval_)) {
    if (CheckSpace()) on_room();
  }
}

absl::Status StateVolume::RoomForValues() const {
  if (!full_.load(std::memory_order_relaxed)) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  return absl::ResourceExhaustedError(
      absl::StrCat("the coordinator's state volume is full (", full_why_,
                   "): new key-value data is refused until space returns; reads, barriers and task "
                   "state go on"));
}

StateVolume::Stats StateVolume::GetStats() const {
  absl::MutexLock lock(&mu_);
  return {full_.load(), free_bytes_};
}

}  // namespace cohort
