#include "service/state/state_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "cohort/state/v1/state.pb.h"
#include "common/metrics.h"
#include "runtime/scheduler/task_scheduler.h"
#include "service/state/scheduler_records.h"
#include "spdlog/spdlog.h"

namespace cohort {

namespace pb = ::cohort::state::v1;

namespace {

constexpr uint32_t kFormat = 1;
// Larger than any record the service can make (a value is at most 1 GiB by default, and the
// limit is a flag): a length past this is damage, not data.
constexpr uint32_t kMaxFrame = uint32_t{1} << 31;

std::string Errno(absl::string_view what, const std::string& path) {
  return absl::StrCat(what, " ", path, ": ", std::strerror(errno));
}

[[noreturn]] void Fatal(const std::string& message) {
  spdlog::critical(
      "{}; a change may be acknowledged only once it is saved, so the coordinator exits now "
      "(started again on the same --state-dir, it recovers everything saved so far)",
      message);
  spdlog::default_logger()->flush();
  std::_Exit(75);
}

// ---- Conversions -----------------------------------------------------------------------

void ToProto(const TaskName& task, pb::Task* out) {
  out->set_job(task.job);
  out->set_id(task.id);
}
TaskName FromProto(const pb::Task& task) { return TaskName{task.job(), task.id()}; }

void ToProto(const absl::Status& status, pb::Status* out) {
  out->set_code(static_cast<int32_t>(status.code()));
  out->set_message(std::string(status.message()));
  status.ForEachPayload([out](absl::string_view url, const absl::Cord& payload) {
    (*out->mutable_payloads())[std::string(url)] = std::string(payload);
  });
}
absl::Status FromProto(const pb::Status& status) {
  if (status.code() == 0) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(status.code()), status.message());
  for (const auto& [url, payload] : status.payloads()) out.SetPayload(url, absl::Cord(payload));
  return out;
}

int64_t TimeoutToProto(absl::Duration d) {
  return d == absl::InfiniteDuration() ? -1 : absl::ToInt64Milliseconds(d);
}
absl::Duration TimeoutFromProto(int64_t ms) {
  return ms < 0 ? absl::InfiniteDuration() : absl::Milliseconds(ms);
}

void ToProto(const DurableBarrier& barrier, pb::BarrierStarted* out) {
  out->set_id(barrier.id);
  out->set_counter(barrier.counter);
  out->set_all_workload(barrier.all_workload);
  for (const TaskName& t : barrier.participants) ToProto(t, out->add_participants());
  out->set_timeout_ms(TimeoutToProto(barrier.timeout));
}

// The record of each kind of change: what the journal appends, and what a snapshot holds.
pb::Record TaskChangeRecord(const DurableTask& task) {
  pb::Record record;
  pb::TaskChanged* r = record.mutable_task();
  ToProto(task.task, r->mutable_task());
  r->set_state(static_cast<int32_t>(task.state));
  r->set_incarnation(task.incarnation);
  r->set_ever_registered(task.ever_registered);
  ToProto(task.error, r->mutable_error());
  return record;
}
pb::Record WholeBarrierRecord(WholeBarrierKind kind, const DurableWholeBarrier& barrier) {
  pb::Record record;
  record.mutable_whole_barrier()->set_kind(static_cast<int32_t>(kind));
  record.mutable_whole_barrier()->set_state(barrier.state);
  ToProto(barrier.result, record.mutable_whole_barrier()->mutable_result());
  return record;
}
pb::Record WaitingRecord(WholeBarrierKind kind, const TaskName& task, bool waiting) {
  pb::Record record;
  record.mutable_whole_barrier_waiting()->set_kind(static_cast<int32_t>(kind));
  ToProto(task, record.mutable_whole_barrier_waiting()->mutable_task());
  record.mutable_whole_barrier_waiting()->set_waiting(waiting);
  return record;
}
pb::Record FirstErrorRecord(const absl::Status& error) {
  pb::Record record;
  ToProto(error, record.mutable_first_error()->mutable_error());
  return record;
}
pb::Record DeviceGroupRecord(const std::vector<TaskName>& members,
                             const DurableDeviceGroup* group) {
  pb::Record record;
  pb::DeviceGroup* r = record.mutable_device_group();
  for (const TaskName& t : members) ToProto(t, r->add_members());
  if (group) {
    r->set_present(true);
    ToProto(group->error, r->mutable_error());
    for (const std::string& p : group->payloads) r->add_payloads(p);
  }
  return record;
}
pb::Record KeyPutRecord(const std::string& key, const std::string& value, int64_t revision) {
  pb::Record record;
  record.mutable_key_put()->set_key(key);
  record.mutable_key_put()->set_value(value);
  record.mutable_key_put()->set_revision(revision);
  return record;
}

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

void JobsToProto(const ServiceConfig& config, google::protobuf::RepeatedPtrField<pb::Job>* out) {
  for (const JobConfig& job : config.jobs) {
    pb::Job* j = out->Add();
    j->set_name(job.name);
    j->set_num_tasks(job.num_tasks);
    j->set_auxiliary(job.auxiliary);
    j->set_recoverable(job.recoverable);
  }
}

// ---- Frames ------------------------------------------------------------------------------

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t GetU32(const unsigned char* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}
uint32_t Crc(absl::string_view data) {
  // zlib takes lengths as uInt; records above 4 GiB are refused before this.
  return static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0),
                                     reinterpret_cast<const Bytef*>(data.data()),
                                     static_cast<uInt>(data.size())));
}

void AppendFrame(const google::protobuf::MessageLite& message, std::string* out) {
  std::string payload = message.SerializeAsString();
  PutU32(out, static_cast<uint32_t>(payload.size()));
  PutU32(out, Crc(payload));
  out->append(payload);
}

bool WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads a file's frames one at a time.
class FrameReader {
 public:
  enum class Result { kFrame, kEnd, kTorn };

  explicit FrameReader(std::string path) : path_(std::move(path)) {}
  ~FrameReader() {
    if (file_) std::fclose(file_);
  }
  FrameReader(const FrameReader&) = delete;
  FrameReader& operator=(const FrameReader&) = delete;

  absl::Status Open() {
    file_ = std::fopen(path_.c_str(), "rb");
    if (!file_) return absl::FailedPreconditionError(Errno("cannot open", path_));
    struct stat st {};
    if (::fstat(::fileno(file_), &st) != 0) {
      return absl::FailedPreconditionError(Errno("cannot stat", path_));
    }
    size_ = st.st_size;
    return absl::OkStatus();
  }

  // kEnd at a clean end of file; kTorn when the file ends inside a frame (a write the crash
  // of the machine cut short); an error when a whole frame is damaged.
  absl::StatusOr<Result> Next(std::string* payload) {
    frame_start_ = offset_;
    unsigned char head[8];
    size_t got = std::fread(head, 1, sizeof head, file_);
    offset_ += static_cast<int64_t>(got);
    if (got == 0 && std::feof(file_)) return Result::kEnd;
    if (got < sizeof head) return Short();
    uint32_t length = GetU32(head);
    uint32_t crc = GetU32(head + 4);
    if (length >= kMaxFrame) {
      return Damaged(absl::StrCat("a record claims a length of ", length, " bytes"));
    }
    // A length past the end of the file is a write cut short, not a reason to allocate it.
    if (length > size_ - offset_) {
      offset_ = size_;
      return Result::kTorn;
    }
    payload->resize(length);
    got = std::fread(payload->data(), 1, length, file_);
    offset_ += static_cast<int64_t>(got);
    if (got < length) return Short();
    if (Crc(*payload) != crc) return Damaged("a record's checksum does not match its contents");
    return Result::kFrame;
  }

  absl::Status Damaged(absl::string_view what) const {
    return absl::DataLossError(
        absl::StrCat(path_, " is damaged at byte ", frame_start_, ": ", what));
  }
  int64_t frame_start() const { return frame_start_; }
  const std::string& path() const { return path_; }

 private:
  // The file ended early, or could not be read.
  absl::StatusOr<Result> Short() const {
    if (std::ferror(file_)) {
      return absl::DataLossError(absl::StrCat("cannot read ", path_, ": ", std::strerror(errno)));
    }
    return Result::kTorn;
  }

  const std::string path_;
  std::FILE* file_ = nullptr;
  int64_t size_ = 0;
  int64_t offset_ = 0;
  int64_t frame_start_ = 0;
};

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
        tasks_[name] = DurableTask{name, static_cast<TaskState>(r.state()), r.incarnation(),
                                   r.ever_registered(), FromProto(r.error())};
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
        keys_[record.key_put().key()] = record.key_put().value();
        revision_ = std::max(revision_, record.key_put().revision());
        return absl::OkStatus();
      case pb::Record::kKeyDeleted: {
        const std::string& key = record.key_deleted().key();
        keys_.erase(key);
        std::string prefix = key + "/";
        for (auto it = keys_.lower_bound(prefix);
             it != keys_.end() && absl::StartsWith(it->first, prefix);) {
          it = keys_.erase(it);
        }
        revision_ = std::max(revision_, record.key_deleted().revision());
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

// "snapshot-12" -> 12.
std::optional<int64_t> Generation(absl::string_view name, absl::string_view prefix) {
  if (!absl::ConsumePrefix(&name, prefix)) return std::nullopt;
  int64_t g = 0;
  if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit) ||
      !absl::SimpleAtoi(name, &g) || g <= 0) {
    return std::nullopt;
  }
  return g;
}

absl::Status SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(Errno("cannot open", dir));
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return absl::InternalError(Errno("cannot sync", dir));
  return absl::OkStatus();
}

// Reads a file's header and checks what it must say.
absl::StatusOr<pb::Header> ReadHeader(FrameReader& reader, pb::Header::Kind kind,
                                      int64_t generation) {
  std::string payload;
  auto r = reader.Next(&payload);
  if (!r.ok()) return r.status();
  pb::Header header;
  if (*r != FrameReader::Result::kFrame || !header.ParseFromString(payload)) {
    return reader.Damaged("its header is missing or unreadable");
  }
  if (header.format() != kFormat) {
    return absl::FailedPreconditionError(absl::StrCat(reader.path(), " has format ",
                                                      header.format(),
                                                      "; this coordinator reads format ", kFormat));
  }
  if (header.kind() != kind || static_cast<int64_t>(header.generation()) != generation) {
    return reader.Damaged("its header does not match its name");
  }
  return header;
}

}  // namespace

// ---- Opening -------------------------------------------------------------------------------

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
      // A log whose header never made it to the disk holds nothing else either.
      struct stat ls {};
      if (newest && ::stat(log.path().c_str(), &ls) == 0 && ls.st_size < 8) break;
      return log_header.status();
    }
    if (log_header->service_incarnation() != header->service_incarnation()) {
      return log.Damaged("it belongs to another service incarnation than the snapshot");
    }
    for (;;) {
      auto r = log.Next(&payload);
      if (!r.ok()) return r.status();
      if (*r == FrameReader::Result::kEnd) break;
      if (*r == FrameReader::Result::kTorn) {
        if (!newest) return log.Damaged("it ends inside a record, and later logs follow it");
        // The last write before a crash of the machine, cut short: it was never synced,
        // and nothing after it exists. Cut it off so the file reads cleanly.
        spdlog::warn(
            "{} ends inside a record at byte {} (a write cut short by a crash); "
            "dropping that record",
            log.path(), log.frame_start());
        if (::truncate(log.path().c_str(), log.frame_start()) != 0) {
          return absl::InternalError(Errno("cannot truncate", log.path()));
        }
        break;
      }
      if (!record.ParseFromString(payload)) return log.Damaged("a record is unreadable");
      if (auto s = replay.Apply(record); !s.ok()) return log.Damaged(s.message());
      ++records;
    }
    last = g;
  }
  store->first_generation_ = last + 1;
  store->service_incarnation_ = header->service_incarnation();
  *restored = std::move(replay).Finish(header->service_incarnation());
  spdlog::info("--state-dir {}: read snapshot-{} and {} logged changes after it", dir, base,
               records);
  return store;
}

// ---- Writing -------------------------------------------------------------------------------

absl::Status StateStore::WriteSnapshot(int64_t generation, const DurableState& state,
                                       const runtime::SchedulerChanges* scheduler) {
  std::string data;
  pb::Header header;
  header.set_format(kFormat);
  header.set_kind(pb::Header::SNAPSHOT);
  header.set_generation(static_cast<uint64_t>(generation));
  header.set_service_incarnation(service_incarnation_);
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
  std::string error = ok ? "" : Errno("cannot write", tmp);
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    return absl::InternalError(error);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(Errno("cannot rename", tmp));
  }
  if (auto s = SyncDir(options_.dir); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  snapshot_bytes_ = static_cast<int64_t>(data.size());
  ++snapshots_;
  return absl::OkStatus();
}

absl::StatusOr<int> StateStore::OpenLog(int64_t generation) {
  const std::string path = absl::StrCat(options_.dir, "/log-", generation);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(Errno("cannot create", path));
  pb::Header header;
  header.set_format(kFormat);
  header.set_kind(pb::Header::LOG);
  header.set_generation(static_cast<uint64_t>(generation));
  header.set_service_incarnation(service_incarnation_);
  header.set_created_unix_ms(absl::ToUnixMillis(absl::Now()));
  std::string data;
  AppendFrame(header, &data);
  if (!WriteAll(fd, data) || ::fdatasync(fd) != 0) {
    std::string error = Errno("cannot write", path);
    ::close(fd);
    return absl::InternalError(error);
  }
  if (auto s = SyncDir(options_.dir); !s.ok()) {
    ::close(fd);
    return s;
  }
  return fd;
}

void StateStore::RemoveBefore(int64_t generation) {
  DIR* d = ::opendir(options_.dir.c_str());
  if (!d) return;
  while (dirent* e = ::readdir(d)) {
    auto g = Generation(e->d_name, "snapshot-");
    if (!g) g = Generation(e->d_name, "log-");
    if (g && *g < generation) ::unlink(absl::StrCat(options_.dir, "/", e->d_name).c_str());
  }
  ::closedir(d);
}

absl::Status StateStore::Start(CoordinationService* service, runtime::TaskScheduler* scheduler) {
  service_ = service;
  scheduler_ = scheduler;
  service_incarnation_ = service->service_incarnation();
  const int64_t generation = first_generation_;
  std::optional<runtime::SchedulerChanges> tasks;
  if (scheduler_ != nullptr) tasks = scheduler_->CaptureState();
  if (auto s = WriteSnapshot(generation, service->CaptureState(), tasks ? &*tasks : nullptr);
      !s.ok()) {
    return s;
  }
  auto fd = OpenLog(generation);
  if (!fd.ok()) return fd.status();
  {
    absl::MutexLock lock(&mu_);
    log_fd_ = *fd;
    generation_ = generation;
    log_bytes_ = 0;
  }
  RemoveBefore(generation);
  spdlog::info("durable state in {} (generation {}, service incarnation {:#x})", options_.dir,
               generation, service_incarnation_);
  background_ = std::thread([this] { Background(); });
  return absl::OkStatus();
}

void StateStore::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (background_.joinable()) background_.join();
  absl::MutexLock lock(&mu_);
  if (log_fd_ >= 0) {
    ::fdatasync(log_fd_);
    ::close(log_fd_);
    log_fd_ = -1;
  }
}

StateStore::Stats StateStore::GetStats() const {
  absl::MutexLock lock(&mu_);
  return {generation_, log_bytes_, records_, snapshots_};
}

void StateStore::Append(const pb::Record& record) {
  std::string frame;
  AppendFrame(record, &frame);
  if (frame.size() >= kMaxFrame) {
    Fatal(absl::StrCat("a change of ", frame.size(), " bytes is too large to save"));
  }
  absl::MutexLock lock(&mu_);
  if (log_fd_ < 0) return;  // stopped: the service is shutting down
  if (!WriteAll(log_fd_, frame)) {
    Fatal(Errno("cannot write the state log in", options_.dir));
  }
  if (options_.sync_interval == absl::ZeroDuration() && ::fdatasync(log_fd_) != 0) {
    Fatal(Errno("cannot sync the state log in", options_.dir));
  }
  log_bytes_ += static_cast<int64_t>(frame.size());
  ++records_;
  if (log_bytes_ > std::max(options_.compact_bytes, 2 * snapshot_bytes_)) compact_wanted_ = true;
}

void StateStore::Background() {
  for (;;) {
    int fd = -1;
    bool compact = false;
    {
      absl::MutexLock lock(&mu_);
      auto wake = [this]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || compact_wanted_; };
      if (options_.sync_interval == absl::ZeroDuration()) {
        mu_.Await(absl::Condition(&wake));
      } else {
        mu_.AwaitWithTimeout(absl::Condition(&wake), options_.sync_interval);
      }
      if (stopping_) return;
      compact = compact_wanted_;
      fd = log_fd_;
    }
    if (compact) {
      Compact();
    } else if (fd >= 0 && ::fdatasync(fd) != 0) {
      Fatal(Errno("cannot sync the state log in", options_.dir));
    }
  }
}

void StateStore::Compact() {
  absl::MutexLock files(&files_mu_);
  int64_t generation = 0;
  {
    absl::MutexLock lock(&mu_);
    generation = generation_ + 1;
  }
  auto fd = OpenLog(generation);
  if (!fd.ok()) Fatal(std::string(fd.status().message()));
  int old_fd = -1;
  {
    // Records from here on go to the new log, so the capture below misses none of them.
    absl::MutexLock lock(&mu_);
    old_fd = log_fd_;
    if (::fdatasync(old_fd) != 0) Fatal(Errno("cannot sync the state log in", options_.dir));
    log_fd_ = *fd;
    generation_ = generation;
    log_bytes_ = 0;
    compact_wanted_ = false;
  }
  ::close(old_fd);
  std::optional<runtime::SchedulerChanges> tasks;
  if (scheduler_ != nullptr) tasks = scheduler_->CaptureState();
  if (auto s = WriteSnapshot(generation, service_->CaptureState(), tasks ? &*tasks : nullptr);
      !s.ok()) {
    // The older snapshot and both logs still hold everything; try again later.
    spdlog::error("cannot write a snapshot of the durable state: {}", std::string(s.message()));
    return;
  }
  RemoveBefore(generation);
  spdlog::debug("durable state: snapshot-{} written, older files removed", generation);
}

// ---- Journal -------------------------------------------------------------------------------

void StateStore::TaskChanged(const DurableTask& task) { Append(TaskChangeRecord(task)); }

void StateStore::WholeBarrierChanged(WholeBarrierKind kind, const DurableWholeBarrier& barrier) {
  Append(WholeBarrierRecord(kind, barrier));
}

void StateStore::WholeBarrierWaiting(WholeBarrierKind kind, const TaskName& task, bool waiting) {
  Append(WaitingRecord(kind, task, waiting));
}

void StateStore::FirstError(const absl::Status& error) { Append(FirstErrorRecord(error)); }

void StateStore::DeviceGroupChanged(const std::vector<TaskName>& members,
                                    const DurableDeviceGroup* group) {
  Append(DeviceGroupRecord(members, group));
}

void StateStore::KeyPut(const std::string& key, const std::string& value, int64_t revision) {
  Append(KeyPutRecord(key, value, revision));
}

void StateStore::KeyDeleted(const std::string& key, int64_t revision) {
  pb::Record record;
  record.mutable_key_deleted()->set_key(key);
  record.mutable_key_deleted()->set_revision(revision);
  Append(record);
}

void StateStore::BarrierStarted(const DurableBarrier& barrier) {
  pb::Record record;
  ToProto(barrier, record.mutable_barrier_started());
  Append(record);
}

void StateStore::BarrierArrived(const std::string& id, int64_t counter, const TaskName& task) {
  pb::Record record;
  record.mutable_barrier_arrived()->set_id(id);
  record.mutable_barrier_arrived()->set_counter(counter);
  ToProto(task, record.mutable_barrier_arrived()->mutable_task());
  Append(record);
}

void StateStore::BarrierDone(const std::string& id, int64_t counter, const absl::Status& result) {
  pb::Record record;
  record.mutable_barrier_done()->set_id(id);
  record.mutable_barrier_done()->set_counter(counter);
  ToProto(result, record.mutable_barrier_done()->mutable_result());
  Append(record);
}

void StateStore::BarrierForgotten(const std::string& id) {
  pb::Record record;
  record.mutable_barrier_forgotten()->set_id(id);
  Append(record);
}

void StateStore::SchedulerChanged(const runtime::SchedulerChanges& changes) {
  pb::Record record;
  SchedulerChangesToProto(changes, record.mutable_scheduler());
  Append(record);
}

// ---- Metrics -------------------------------------------------------------------------------

void AddStateMetrics(MetricsRegistry& registry, const StateStore* store, bool restored) {
  registry.AddCollector([store, restored] {
    StateStore::Stats stats = store->GetStats();
    std::vector<CollectedFamily> out;
    out.push_back({"cohort_coordinator_state_restored",
                   "1 when this coordinator started from state saved in --state-dir, 0 when "
                   "it started empty.",
                   "gauge",
                   {{{}, restored ? 1.0 : 0.0}}});
    out.push_back({"cohort_coordinator_state_log_bytes",
                   "Bytes in the current state log, since the last snapshot.",
                   "gauge",
                   {{{}, static_cast<double>(stats.log_bytes)}}});
    out.push_back({"cohort_coordinator_state_generation",
                   "Generation of the current state snapshot and log.",
                   "gauge",
                   {{{}, static_cast<double>(stats.generation)}}});
    out.push_back({"cohort_coordinator_state_records_total",
                   "Changes written to the state log since the coordinator started.",
                   "counter",
                   {{{}, static_cast<double>(stats.records)}}});
    out.push_back({"cohort_coordinator_state_snapshots_total",
                   "State snapshots written since the coordinator started (one at the start).",
                   "counter",
                   {{{}, static_cast<double>(stats.snapshots)}}});
    return out;
  });
}

}  // namespace cohort
