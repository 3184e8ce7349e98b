// A generation's snapshot and new log, and removing the files of the generations before it.
#include "service/state/generation_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cohort/state/v1/state.pb.h"
#include "service/state/scheduler_records.h"
#include "service/state/state_store_internal.h"
#include "service/state/state_volume.h"

namespace cohort {

namespace pb = ::cohort::state::v1;
using state_store_internal::AppendFrame;
using state_store_internal::DeviceGroupRecord;
using state_store_internal::Errno;
using state_store_internal::FirstErrorRecord;
using state_store_internal::Generation;
using state_store_internal::JobsToProto;
using state_store_internal::KeyPutRecord;
using state_store_internal::kFormat;
using state_store_internal::SyncDir;
using state_store_internal::TaskChangeRecord;
using state_store_internal::ToProto;
using state_store_internal::WaitingRecord;
using state_store_internal::WholeBarrierRecord;
using state_store_internal::WriteAll;

GenerationFiles::GenerationFiles(const StateStoreOptions& options, const ServiceConfig& config,
                                 int64_t room_bytes, StateVolume* volume)
    : options_(options), config_(config), room_bytes_(room_bytes), volume_(volume) {}

absl::StatusOr<int64_t> GenerationFiles::WriteSnapshot(int64_t generation,
                                                       uint64_t service_incarnation,
                                                       const DurableState& state,
                                                       const runtime::SchedulerChanges* scheduler) {
  std::string data;
  pb::Header header;
  header.set_format(kFormat);
  header.set_kind(pb::Header::SNAPSHOT);
  header.set_generation(static_cast<uint64_t>(generation));
  header.set_service_incarnation(service_incarnation);
  JobsToProto(config_, header.mutable_jobs());
  header.set_created_unix_ms(absl::ToUnixMillis(absl::Now()));
  AppendFrame(header, &data);

  for (const DurableTask& task : state.tasks) AppendFrame(TaskChangeRecord(task), &data);
  for (auto [kind, barrier] : {std::pair{WholeBarrierKind::kRegister, &state.register_barrier},
                               std::pair{WholeBarrierKind::kShutdown, &state.shutdown_barrier}}) {
    AppendFrame(WholeBarrierRecord(kind, *barrier), &data);
    for (const TaskName& task : barrier->waiting) {
      AppendFrame(WaitingRecord(kind, task, /*waiting=*/true), &data);
    }
  }
  AppendFrame(FirstErrorRecord(state.first_error), &data);
  for (const DurableDeviceGroup& group : state.device_groups) {
    AppendFrame(DeviceGroupRecord(group.members, &group), &data);
  }
  // Revision 0: the snapshot's KeyRevision record carries it.
  for (const DurableKey& key : state.keys) AppendFrame(KeyPutRecord(key.key, key.value, 0), &data);
  pb::Record record;
  record.mutable_key_revision()->set_revision(state.key_revision);
  AppendFrame(record, &data);
  for (const DurableBarrier& barrier : state.barriers) {
    record.Clear();
    pb::BarrierInstance* r = record.mutable_barrier();
    ToProto(barrier, r->mutable_start());
    for (const TaskName& t : barrier.arrived) ToProto(t, r->add_arrived());
    r->set_done(barrier.done);
    ToProto(barrier.result, r->mutable_result());
    AppendFrame(record, &data);
  }
  if (scheduler != nullptr) {
    SplitSchedulerState(*scheduler, size_t{16} << 20, [&data](const pb::SchedulerChanges& part) {
      pb::Record r;
      *r.mutable_scheduler() = part;
      AppendFrame(r, &data);
    });
  }

  const std::string path = absl::StrCat(options_.dir, "/snapshot-", generation);
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(Errno("cannot create", tmp));
  bool ok = WriteAll(fd, data) && ::fdatasync(fd) == 0;
  const bool no_space = !ok && errno == ENOSPC;
  std::string error = ok ? "" : Errno("cannot write", tmp);
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    return no_space ? absl::ResourceExhaustedError(error) : absl::InternalError(error);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(Errno("cannot rename", tmp));
  }
  if (auto s = SyncDir(options_.dir); !s.ok()) return s;
  return static_cast<int64_t>(data.size());
}

absl::StatusOr<NewLogFile> GenerationFiles::OpenLog(int64_t generation,
                                                    uint64_t service_incarnation) {
  const std::string path = absl::StrCat(options_.dir, "/log-", generation);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(Errno("cannot create", path));
  pb::Header header;
  header.set_format(kFormat);
  header.set_kind(pb::Header::LOG);
  header.set_generation(static_cast<uint64_t>(generation));
  header.set_service_incarnation(service_incarnation);
  header.set_created_unix_ms(absl::ToUnixMillis(absl::Now()));
  header.set_boot_id(state_store_internal::BootId(options_));
  header.set_answers_before_sync(options_.sync_interval > absl::ZeroDuration());
  std::string data;
  AppendFrame(header, &data);
  NewLogFile log;
  log.fd = fd;
  log.end = static_cast<int64_t>(data.size());
  bool ok = volume_->WriteLog(fd, 0, data, /*may_wait=*/false);
  if (ok) {
    log.room = StateVolume::WriteRoom(fd, log.end, log.end + room_bytes_);
    ok = ::fdatasync(fd) == 0;
  }
  if (!ok) {
    std::string error = Errno("cannot write", path);
    ::close(fd);
    ::unlink(path.c_str());
    return absl::InternalError(error);
  }
  if (auto s = SyncDir(options_.dir); !s.ok()) {
    ::close(fd);
    return s;
  }
  return log;
}

void GenerationFiles::RemoveBefore(int64_t generation) {
  DIR* d = ::opendir(options_.dir.c_str());
  if (!d) return;
  while (dirent* e = ::readdir(d)) {
    auto g = Generation(e->d_name, "snapshot-");
    if (!g) g = Generation(e->d_name, "log-");
    if (g && *g < generation) ::unlink(absl::StrCat(options_.dir, "/", e->d_name).c_str());
  }
  ::closedir(d);
}

}  // namespace cohort
