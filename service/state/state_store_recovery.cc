// Opening a --state-dir: locking it, and rebuilding the saved state from its files.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "cohort/state/v1/state.pb.h"
#include "common/failure_reason.h"
#include "runtime/scheduler/task_scheduler.h"
#include "service/state/generation_files.h"
#include "service/state/scheduler_records.h"
#include "service/state/state_store.h"
#include "service/state/state_store_internal.h"
#include "service/state/state_volume.h"
#include "spdlog/spdlog.h"

namespace cohort {

namespace pb = ::cohort::state::v1;
using state_store_internal::BootId;
using state_store_internal::Errno;
using state_store_internal::FrameReader;
using state_store_internal::FromProto;
using state_store_internal::Generation;
using state_store_internal::JobsToProto;
using state_store_internal::ReadHeader;
using state_store_internal::TimeoutFromProto;

namespace {

std::string JobsText(const google::protobuf::RepeatedPtrField<pb::Job>& jobs) {
  std::vector<std::string> parts;
  for (const pb::Job& job : jobs) {
    parts.push_back(absl::StrCat(job.name(), "=", job.num_tasks(),
                                 job.auxiliary() ? " (auxiliary)" : "",
                                 job.recoverable() ? " (recoverable)" : ""));
  }
  std::sort(parts.begin(), parts.end());
  return absl::StrJoin(parts, ", ");
}

// ---- Replay ------------------------------------------------------------------------------

// The state being rebuilt from a snapshot and the logs after it.
class Replay {
 public:
  explicit Replay(runtime::TaskScheduler* scheduler) : scheduler_(scheduler) {}

  absl::Status Apply(const pb::Record& record) {
    switch (record.change_case()) {
      case pb::Record::kScheduler: {
        auto changes = SchedulerChangesFromProto(record.scheduler());
        if (!changes.ok()) return changes.status();
        // A coordinator that runs no scheduler (tests of the service alone) skips them.
        if (scheduler_ != nullptr) scheduler_->Restore(*changes);
        return absl::OkStatus();
      }
      case pb::Record::kTask: {
        const pb::TaskChanged& r = record.task();
        if (r.state() < 0 || r.state() > static_cast<int>(TaskState::kError)) {
          return absl::DataLossError(absl::StrCat("a task record has unknown state ", r.state()));
        }
        TaskName name = FromProto(r.task());
        // A reason this coordinator does not know (state of a newer one) is only a label
        // lost, not state: it restores as unspecified rather than refusing the files.
        tasks_[name] =
            DurableTask{name,
                        static_cast<TaskState>(r.state()),
                        r.incarnation(),
                        r.ever_registered(),
                        FromProto(r.error()),
                        FailureReasonFromNumber(r.reason()).value_or(FailureReason::kUnspecified),
                        r.reset_request()};
        return absl::OkStatus();
      }
      case pb::Record::kWholeBarrier: {
        DurableWholeBarrier* b = Whole(record.whole_barrier().kind());
        if (!b) return UnknownKind(record.whole_barrier().kind());
        b->state = record.whole_barrier().state();
        b->result = FromProto(record.whole_barrier().result());
        return absl::OkStatus();
      }
      case pb::Record::kWholeBarrierWaiting: {
        const pb::WholeBarrierWaiting& r = record.whole_barrier_waiting();
        if (!Whole(r.kind())) return UnknownKind(r.kind());
        auto& waiting = r.kind() == 0 ? register_waiting_ : shutdown_waiting_;
        if (r.waiting()) {
          waiting.insert(FromProto(r.task()));
        } else {
          waiting.erase(FromProto(r.task()));
        }
        return absl::OkStatus();
      }
      case pb::Record::kFirstError:
        state_.first_error = FromProto(record.first_error().error());
        return absl::OkStatus();
      case pb::Record::kDeviceGroup: {
        const pb::DeviceGroup& r = record.device_group();
        std::vector<TaskName> members;
        for (const pb::Task& t : r.members()) members.push_back(FromProto(t));
        if (!r.present()) {
          groups_.erase(members);
          return absl::OkStatus();
        }
        DurableDeviceGroup group{members, FromProto(r.error()), {}};
        group.payloads.assign(r.payloads().begin(), r.payloads().end());
        groups_[members] = std::move(group);
        return absl::OkStatus();
      }
      case pb::Record::kKeyPut:
        Put(record.key_put());
        return absl::OkStatus();
      case pb::Record::kKeyDeleted:
        Delete(record.key_deleted());
        return absl::OkStatus();
      case pb::Record::kKeyChanges: {
        // The frame is whole (a torn one never gets here), so every change in it was made.
        const auto& changes = record.key_changes().changes();
        for (const pb::KeyChanges::Change& change : changes) {
          if (change.change_case() == pb::KeyChanges::Change::CHANGE_NOT_SET) {
            return absl::DataLossError("a change of keys of a kind this coordinator does not know");
          }
        }
        for (const pb::KeyChanges::Change& change : changes) {
          if (change.has_put()) {
            Put(change.put());
          } else {
            Delete(change.deleted());
          }
        }
        return absl::OkStatus();
      }
      case pb::Record::kKeyRevision:
        revision_ = std::max(revision_, record.key_revision().revision());
        return absl::OkStatus();
      case pb::Record::kBarrierStarted:
        barriers_[record.barrier_started().id()] = Started(record.barrier_started());
        return absl::OkStatus();
      case pb::Record::kBarrierArrived: {
        const pb::BarrierArrived& r = record.barrier_arrived();
        auto found = Instance(r.id(), r.counter());
        if (!found.ok()) return found.status();
        if (*found) (*found)->arrived.push_back(FromProto(r.task()));
        return absl::OkStatus();
      }
      case pb::Record::kBarrierDone: {
        const pb::BarrierDone& r = record.barrier_done();
        auto found = Instance(r.id(), r.counter());
        if (!found.ok()) return found.status();
        if (!*found) return absl::OkStatus();
        (*found)->done = true;
        (*found)->result = FromProto(r.result());
        return absl::OkStatus();
      }
      case pb::Record::kBarrierForgotten:
        barriers_.erase(record.barrier_forgotten().id());
        return absl::OkStatus();
      case pb::Record::kBarrier: {
        const pb::BarrierInstance& r = record.barrier();
        DurableBarrier barrier = Started(r.start());
        for (const pb::Task& t : r.arrived()) barrier.arrived.push_back(FromProto(t));
        barrier.done = r.done();
        barrier.result = FromProto(r.result());
        barriers_[barrier.id] = std::move(barrier);
        return absl::OkStatus();
      }
      case pb::Record::kLogClosed:
        return absl::OkStatus();  // Open looks at it: the log is whole
      case pb::Record::CHANGE_NOT_SET:
        break;
    }
    return absl::DataLossError("a record of a kind this coordinator does not know");
  }

  DurableState Finish(uint64_t service_incarnation) && {
    state_.service_incarnation = service_incarnation;
    for (auto& [name, task] : tasks_) state_.tasks.push_back(std::move(task));
    state_.register_barrier.waiting.assign(register_waiting_.begin(), register_waiting_.end());
    state_.shutdown_barrier.waiting.assign(shutdown_waiting_.begin(), shutdown_waiting_.end());
    for (auto& [key, value] : keys_) state_.keys.push_back({key, std::move(value)});
    state_.key_revision = revision_;
    for (auto& [id, barrier] : barriers_) {
      std::sort(barrier.arrived.begin(), barrier.arrived.end());
      barrier.arrived.erase(std::unique(barrier.arrived.begin(), barrier.arrived.end()),
                            barrier.arrived.end());
      state_.barriers.push_back(std::move(barrier));
    }
    for (auto& [members, group] : groups_) state_.device_groups.push_back(std::move(group));
    return std::move(state_);
  }

 private:
  void Put(const pb::KeyPut& put) {
    keys_[put.key()] = put.value();
    revision_ = std::max(revision_, put.revision());
  }

  // The key and every key under "key/".
  void Delete(const pb::KeyDeleted& deleted) {
    const std::string& key = deleted.key();
    keys_.erase(key);
    std::string prefix = key + "/";
    for (auto it = keys_.lower_bound(prefix);
         it != keys_.end() && absl::StartsWith(it->first, prefix);) {
      it = keys_.erase(it);
    }
    revision_ = std::max(revision_, deleted.revision());
  }

  DurableWholeBarrier* Whole(int kind) {
    if (kind == static_cast<int>(WholeBarrierKind::kRegister)) return &state_.register_barrier;
    if (kind == static_cast<int>(WholeBarrierKind::kShutdown)) return &state_.shutdown_barrier;
    return nullptr;
  }
  static absl::Status UnknownKind(int kind) {
    return absl::DataLossError(absl::StrCat("a record names unknown whole-job barrier ", kind));
  }
  static DurableBarrier Started(const pb::BarrierStarted& r) {
    DurableBarrier barrier;
    barrier.id = r.id();
    barrier.counter = r.counter();
    barrier.all_workload = r.all_workload();
    for (const pb::Task& t : r.participants()) barrier.participants.push_back(FromProto(t));
    barrier.timeout = TimeoutFromProto(r.timeout_ms());
    return barrier;
  }
  // The instance a record is about; null when the state already holds a later instance of
  // the id: a snapshot is captured after its log was switched, so the log's first records
  // may be about instances the snapshot has already moved past (they are in it).
  absl::StatusOr<DurableBarrier*> Instance(const std::string& id, int64_t counter) {
    auto it = barriers_.find(id);
    if (it != barriers_.end() && it->second.counter > counter) return nullptr;
    if (it == barriers_.end() || it->second.counter != counter) {
      return absl::DataLossError(absl::StrCat("a record of barrier \"", id, "\" instance ", counter,
                                              " comes before that instance started"));
    }
    return &it->second;
  }

  DurableState state_;
  std::map<TaskName, DurableTask> tasks_;
  std::set<TaskName> register_waiting_;
  std::set<TaskName> shutdown_waiting_;
  std::map<std::string, std::string> keys_;
  int64_t revision_ = 0;
  std::map<std::string, DurableBarrier> barriers_;
  std::map<std::vector<TaskName>, DurableDeviceGroup> groups_;
  runtime::TaskScheduler* const scheduler_;
};

}  // namespace

// ---- Opening -------------------------------------------------------------------------------

int64_t AutoCompactBytes(int64_t volume_bytes) {
  return std::clamp<int64_t>(volume_bytes / 8, int64_t{1} << 20, int64_t{64} << 20);
}

int64_t LogRoomBytes(int64_t compact_bytes) {
  return std::clamp<int64_t>(compact_bytes / 16, int64_t{64} << 10, int64_t{4} << 20);
}

int64_t ReserveBytes(int64_t compact_bytes) {
  return std::clamp<int64_t>(compact_bytes / 4, int64_t{256} << 10, int64_t{16} << 20);
}

StateStore::StateStore(StateStoreOptions options, const ServiceConfig& config, int lock_fd)
    : options_(std::move(options)), config_(config), lock_fd_(lock_fd) {}

StateStore::~StateStore() {
  Stop();
  ::close(lock_fd_);
}

absl::StatusOr<std::unique_ptr<StateStore>> StateStore::Open(const StateStoreOptions& options,
                                                             const ServiceConfig& config,
                                                             std::optional<DurableState>* restored,
                                                             runtime::TaskScheduler* scheduler) {
  restored->reset();
  const std::string& dir = options.dir;
  if (dir.empty()) return absl::InvalidArgumentError("--state-dir must not be empty");
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(Errno("cannot create --state-dir", dir));
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("--state-dir ", dir, " is not a directory"));
  }
  const std::string lock_path = dir + "/LOCK";
  int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0) return absl::FailedPreconditionError(Errno("cannot open", lock_path));
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock_fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "--state-dir ", dir, " is in use by another coordinator (", lock_path, " is locked)"));
  }
  std::unique_ptr<StateStore> store(new StateStore(options, config, lock_fd));
  if (options.compact_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--state-compact-bytes must not be negative, not ", options.compact_bytes));
  }
  store->compact_bytes_ = options.compact_bytes;
  if (store->compact_bytes_ == 0) {
    struct statvfs vs {};
    if (::statvfs(dir.c_str(), &vs) != 0) {
      return absl::FailedPreconditionError(Errno("cannot read the size of the volume of", dir));
    }
    const int64_t volume = static_cast<int64_t>(vs.f_blocks) * static_cast<int64_t>(vs.f_frsize);
    store->compact_bytes_ = AutoCompactBytes(volume);
    spdlog::info("--state-dir {}: its volume holds {} MiB; compacting the log at {} MiB", dir,
                 volume >> 20, store->compact_bytes_ >> 20);
  }
  if (options.log_room_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the log's room must not be negative, not ", options.log_room_bytes));
  }
  store->room_bytes_ =
      options.log_room_bytes > 0 ? options.log_room_bytes : LogRoomBytes(store->compact_bytes_);
  store->volume_ = std::make_unique<StateVolume>(
      dir, ReserveBytes(store->compact_bytes_), options.space_check_interval,
      [self = store.get()](absl::Duration wait) { return self->StoppedWithin(wait); });
  store->files_ = std::make_unique<GenerationFiles>(store->options_, store->config_,
                                                    store->room_bytes_, store->volume_.get());

  // What is there.
  std::vector<int64_t> snapshots, logs;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return absl::FailedPreconditionError(Errno("cannot read", dir));
  while (dirent* e = ::readdir(d)) {
    absl::string_view name = e->d_name;
    if (absl::EndsWith(name, ".tmp")) {
      ::unlink((dir + "/" + e->d_name).c_str());  // a snapshot cut short: never used
    } else if (auto g = Generation(name, "snapshot-")) {
      snapshots.push_back(*g);
    } else if (auto g = Generation(name, "log-")) {
      logs.push_back(*g);
    }
  }
  ::closedir(d);
  std::sort(snapshots.begin(), snapshots.end());
  std::sort(logs.begin(), logs.end());
  if (snapshots.empty()) {
    if (!logs.empty()) {
      return absl::DataLossError(absl::StrCat("--state-dir ", dir, " has log-", logs.front(),
                                              " but no snapshot to replay it over"));
    }
    spdlog::info("--state-dir {} holds no saved state; starting empty", dir);
    return store;
  }

  // The newest snapshot...
  const int64_t base = snapshots.back();
  FrameReader snapshot(absl::StrCat(dir, "/snapshot-", base));
  if (auto s = snapshot.Open(); !s.ok()) return s;
  auto header = ReadHeader(snapshot, pb::Header::SNAPSHOT, base);
  if (!header.ok()) return header.status();
  pb::Header ours;
  JobsToProto(config, ours.mutable_jobs());
  if (JobsText(header->jobs()) != JobsText(ours.jobs())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--state-dir ", dir, " holds the state of a coordinator of other jobs (",
        JobsText(header->jobs()), "; this one has ", JobsText(ours.jobs()),
        "): refusing to start on it. Point --state-dir at this job's own directory, or empty "
        "it to start afresh"));
  }
  Replay replay(scheduler);
  std::string payload;
  pb::Record record;
  for (;;) {
    auto r = snapshot.Next(&payload);
    if (!r.ok()) return r.status();
    if (*r == FrameReader::Result::kEnd) break;
    if (*r == FrameReader::Result::kTorn) return snapshot.Damaged("it ends inside a record");
    if (!record.ParseFromString(payload)) return snapshot.Damaged("a record is unreadable");
    if (auto s = replay.Apply(record); !s.ok()) return snapshot.Damaged(s.message());
  }

  // ... and every log from its generation on, in order and without a gap.
  int64_t last = base;
  int64_t records = 0;
  // Of the last log read: its header, and whether it ends with LogClosed.
  std::optional<pb::Header> last_header;
  bool closed = false;
  std::vector<int64_t> later;
  for (int64_t g : logs) {
    if (g >= base) later.push_back(g);
  }
  for (size_t i = 0; i < later.size(); ++i) {
    const int64_t g = later[i];
    const bool newest = i + 1 == later.size();
    if (g != (i == 0 ? base : later[i - 1] + 1)) {
      return absl::DataLossError(absl::StrCat("--state-dir ", dir, " lacks log-",
                                              i == 0 ? base : later[i - 1] + 1,
                                              ": the state after it is lost"));
    }
    FrameReader log(absl::StrCat(dir, "/log-", g));
    if (auto s = log.Open(); !s.ok()) return s;
    auto log_header = ReadHeader(log, pb::Header::LOG, g);
    if (!log_header.ok()) {
      // A log whose header never made it to the disk holds nothing else either: the new log
      // that this start writes takes its name.
      if (newest && !log.torn_why().empty()) {
        spdlog::warn("{}: its header is torn ({}): a log started just before a crash; ignoring it",
                     log.path(), log.torn_why());
        break;
      }
      return log_header.status();
    }
    if (log_header->service_incarnation() != header->service_incarnation()) {
      return log.Damaged("it belongs to another service incarnation than the snapshot");
    }
    last_header = *log_header;
    closed = false;
    for (;;) {
      auto r = log.Next(&payload);
      if (!r.ok()) return r.status();
      if (*r == FrameReader::Result::kEnd) break;
      if (*r == FrameReader::Result::kTorn && log.tail_is_zeros()) {
        // The log's end: the room written ahead of it, never used (or used by writes a crash
        // cut short before they reached the disk, whose answers never went out). In an older
        // log, its room was left by a crash before the compaction that replaced it cut it.
        if (newest && ::truncate(log.path().c_str(), log.frame_start()) != 0) {
          return absl::InternalError(Errno("cannot truncate", log.path()));
        }
        break;
      }
      if (*r == FrameReader::Result::kTorn) {
        if (!newest) {
          return log.Damaged(absl::StrCat(log.torn_why(), ", and later logs follow it"));
        }
        // The last writes before a crash of the machine, cut short before they were synced;
        // nothing after them exists. Cut them off so the file reads cleanly.
        struct stat ls {};
        const int64_t size = ::stat(log.path().c_str(), &ls) == 0 ? ls.st_size : -1;
        spdlog::warn(
            "{}: from byte {} {} (writes a crash cut short before they were synced); dropping "
            "those {} bytes",
            log.path(), log.frame_start(), log.torn_why(), size - log.frame_start());
        if (::truncate(log.path().c_str(), log.frame_start()) != 0) {
          return absl::InternalError(Errno("cannot truncate", log.path()));
        }
        break;
      }
      if (!record.ParseFromString(payload)) return log.Damaged("a record is unreadable");
      if (auto s = replay.Apply(record); !s.ok()) return log.Damaged(s.message());
      closed = record.has_log_closed();
      if (!closed) ++records;
    }
    last = g;
  }
  store->first_generation_ = last + 1;
  uint64_t incarnation = header->service_incarnation();
  store->saved_incarnation_ = incarnation;
  const std::string boot = BootId(options);
  if (last_header && last_header->answers_before_sync() && !closed &&
      (boot.empty() || boot != last_header->boot_id())) {
    // The faster mode answered before syncing, and the machine restarted since without the
    // log being closed: changes someone was told of may be missing. Say so to every client.
    const uint64_t was = incarnation;
    while (incarnation == was) incarnation = RandomIncarnation();
    spdlog::warn(
        "--state-dir {}: the coordinator that wrote it answered before syncing its changes "
        "(--state-sync-interval above 0) and the machine restarted since (boot {}, now {}) "
        "before its log was closed, so changes it acknowledged may be lost: starting from "
        "what was saved under a new service incarnation {:#x} (was {:#x}), so that every "
        "client sees a restart",
        dir, last_header->boot_id().empty() ? "unknown" : last_header->boot_id(),
        boot.empty() ? "unknown" : boot, incarnation, was);
  }
  store->service_incarnation_ = incarnation;
  *restored = std::move(replay).Finish(incarnation);
  spdlog::info("--state-dir {}: read snapshot-{} and {} logged changes after it", dir, base,
               records);
  return store;
}

}  // namespace cohort
