// The durable state (service/state): a coordination service journaling into a StateStore on
// a real directory, "crashed" by copying that directory at a moment (what kill -9 leaves:
// every write(2) that returned is in the files), and a second service started from the copy.
#include "service/state/state_store.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "common/failure_reason.h"
#include "gtest/gtest.h"
#include "service/backend/local_backend.h"
#include "service/core/coordination_service.h"
#include "service/core/errors.h"
#include "service/state/state_store_internal.h"
#include "service/torch/forwarded_commands.h"
#include "service/torch/tcpstore_codec.h"
#include "service/torch/torch_keys.h"
#include "tests/service/core/callback_result.h"
#include "tests/service/torch/replies.h"

namespace cohort {
namespace {

namespace fs = std::filesystem;
using testing::StatusResult;
using testing::ValueResult;

const TaskName kW0{"worker", 0};
const TaskName kW1{"worker", 1};
const TaskName kW2{"worker", 2};
const TaskName kS0{"sidecar", 0};
const TaskName kS1{"sidecar", 1};

ServiceConfig Config() {
  ServiceConfig config;
  config.jobs.push_back({"worker", 3});
  config.jobs.push_back({"sidecar", 2, /*auxiliary=*/true});
  config.heartbeat_timeout = absl::Seconds(100);
  config.register_timeout = absl::Seconds(60);
  config.shutdown_barrier_timeout = absl::Seconds(30);
  config.barriers.max_finished = 3;  // small, so that tests see ids forgotten
  return config;
}

std::string StatusText(const absl::Status& s) {
  if (s.ok()) return "OK";
  // Payloads in the order of their names: a restored status holds them in another order.
  std::string out = absl::StrCat(absl::StatusCodeToString(s.code()), ": ", s.message());
  std::map<std::string, std::string> payloads;
  s.ForEachPayload([&payloads](absl::string_view url, const absl::Cord& p) {
    payloads[std::string(url)] = std::string(p);
  });
  for (const auto& [url, p] : payloads)
    absl::StrAppend(&out, " {", url, "=", absl::CHexEscape(p), "}");
  return out;
}

std::string Names(const std::vector<TaskName>& tasks) {
  return absl::StrJoin(
      tasks, ",", [](std::string* out, const TaskName& t) { absl::StrAppend(out, t.ToString()); });
}

// Everything in a DurableState, one fact a line, in a fixed order: two states are the same
// when their descriptions are.
std::string Describe(const DurableState& state) {
  std::vector<std::string> lines;
  lines.push_back(absl::StrCat("incarnation ", state.service_incarnation));
  for (const DurableTask& t : state.tasks) {
    lines.push_back(absl::StrCat("task ", t.task.ToString(), " ", TaskStateName(t.state), " inc ",
                                 t.incarnation, " ever ", t.ever_registered, " ",
                                 StatusText(t.error), " (", FailureReasonName(t.reason),
                                 ") reset by [", t.reset_request, "]"));
  }
  for (const auto* b : {&state.register_barrier, &state.shutdown_barrier}) {
    lines.push_back(absl::StrCat("whole ", b->state, " ", StatusText(b->result), " waiting ",
                                 Names(b->waiting)));
  }
  lines.push_back(absl::StrCat("first error ", StatusText(state.first_error)));
  std::vector<std::string> keys;
  for (const DurableKey& k : state.keys) keys.push_back(absl::StrCat("key ", k.key, "=", k.value));
  std::sort(keys.begin(), keys.end());
  lines.insert(lines.end(), keys.begin(), keys.end());
  lines.push_back(absl::StrCat("revision ", state.key_revision));
  std::vector<std::string> barriers;
  for (const DurableBarrier& b : state.barriers) {
    barriers.push_back(absl::StrCat("barrier ", b.id, "#", b.counter, " done ", b.done, " ",
                                    StatusText(b.result), " all ", b.all_workload, " of [",
                                    Names(b.participants), "] arrived [", Names(b.arrived),
                                    "] timeout ", absl::FormatDuration(b.timeout)));
  }
  std::sort(barriers.begin(), barriers.end());
  lines.insert(lines.end(), barriers.begin(), barriers.end());
  for (const DurableDeviceGroup& g : state.device_groups) {
    lines.push_back(absl::StrCat("devices [", Names(g.members), "] ", StatusText(g.error), " ",
                                 absl::StrJoin(g.payloads, "|")));
  }
  return absl::StrJoin(lines, "\n");
}

class StateStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "cohort-state-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    dir_ = root_ + "/state";
    StartFresh();
  }
  void TearDown() override {
    Shutdown();
    fs::remove_all(root_);
  }

  // The store stopped before the service goes (its compaction reads the service), as
  // cohort-coordinator does.
  void Shutdown() {
    if (store_) store_->Stop();
    service_.reset();
    store_.reset();
  }

  StateStoreOptions Options(const std::string& dir) {
    StateStoreOptions options;
    options.dir = dir;
    options.sync_interval = sync_interval_;
    options.boot_id = boot_id_;
    options.compact_bytes = compact_bytes_;
    options.log_room_bytes = log_room_bytes_;
    options.before_group_sync = before_group_sync_;
    return options;
  }

  void StartFresh() {
    std::optional<DurableState> restored;
    auto store = StateStore::Open(Options(dir_), Config(), &restored);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_FALSE(restored.has_value());
    store_ = std::move(*store);
    auto service = CoordinationService::Create(Config(), &clock_, nullptr, store_.get());
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = std::move(*service);
    ASSERT_TRUE(store_->Start(service_.get()).ok());
  }

  // The directory as kill -9 would leave it now, in a new place.
  std::string CrashCopy() {
    std::string copy = absl::StrCat(root_, "/crash-", ++copies_);
    store_->WithFilesSettled([&] { fs::copy(dir_, copy); });
    fs::remove(copy + "/LOCK");  // the lock dies with the process
    return copy;
  }

  absl::StatusOr<DurableState> Read(const std::string& dir,
                                    const ServiceConfig& config = Config()) {
    std::optional<DurableState> restored;
    auto store = StateStore::Open(Options(dir), config, &restored);
    if (!store.ok()) return store.status();
    if (!restored) return absl::NotFoundError("no saved state");
    return *std::move(restored);
  }

  // The service replaced by one started from the directory as a crash now would leave it.
  void CrashAndRestart() { RestartFrom(CrashCopy()); }

  // The service replaced by one started from `copy` (a crash copy), which becomes the
  // directory.
  void RestartFrom(const std::string& copy) {
    Shutdown();
    fs::remove_all(dir_);
    fs::rename(copy, dir_);
    std::optional<DurableState> restored;
    auto store = StateStore::Open(Options(dir_), Config(), &restored);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE(restored.has_value());
    store_ = std::move(*store);
    auto service =
        CoordinationService::Create(Config(), &clock_, nullptr, store_.get(), &*restored);
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = std::move(*service);
    ASSERT_TRUE(store_->Start(service_.get()).ok());
  }

  // A crash now loses nothing: the saved state is the service's state.
  void ExpectSurvivesCrash(const std::string& step) {
    SCOPED_TRACE(step);
    auto saved = Read(CrashCopy());
    ASSERT_TRUE(saved.ok()) << saved.status();
    EXPECT_EQ(Describe(*saved), Describe(service_->CaptureState()));
  }

  StatusResult Register(const TaskName& task, uint64_t incarnation) {
    StatusResult result;
    service_->RegisterTask(task, incarnation, service_->NewWaiterId(), result.Callback());
    return result;
  }
  ValueResult<int64_t> Barrier(const std::string& id, int64_t counter, const TaskName& caller,
                               std::vector<TaskName> tasks = {},
                               absl::Duration timeout = absl::Seconds(10)) {
    ValueResult<int64_t> result;
    service_->Barrier(id, counter, timeout, caller, std::move(tasks), service_->NewWaiterId(),
                      result.Callback());
    return result;
  }
  void Advance(absl::Duration d) {
    clock_.Advance(d);
    service_->RunTimers();
  }
  TaskStateInfo Info(const TaskName& task) {
    auto states = service_->GetTaskStates({task});
    EXPECT_TRUE(states.ok()) << states.status();
    return states.ok() ? states->front() : TaskStateInfo{};
  }

  // Registers every task and passes the register barrier.
  void RegisterAll() {
    std::vector<StatusResult> results;
    for (const TaskName& t : {kW0, kW1, kW2, kS0, kS1}) results.push_back(Register(t, 7));
    for (const StatusResult& r : results) {
      ASSERT_TRUE(r.fired());
      ASSERT_TRUE(r.value().ok()) << r.value();
    }
  }

  // The newest log, every change made so far written to it (the store writes its changes in
  // batches, when it syncs).
  std::string NewestLog() {
    if (store_) store_->WithFilesSettled([] {});
    std::string newest;
    for (const auto& e : fs::directory_iterator(dir_)) {
      std::string name = e.path().filename().string();
      if (absl::StartsWith(name, "log-") &&
          (newest.empty() || std::stoll(name.substr(4)) > std::stoll(newest.substr(4)))) {
        newest = name;
      }
    }
    return dir_ + "/" + newest;
  }

  // The bytes written to the newest log, every change made so far among them (after them, to
  // the end of the file, the room written ahead).
  uintmax_t LogEnd() {
    NewestLog();
    return static_cast<uintmax_t>(store_->GetStats().written_log_bytes);
  }

  // A crash copy whose newest log is cut to `bytes`: what a crash of the machine in the
  // middle of writing it could leave.
  std::string CutCopy(uintmax_t bytes) {
    std::string copy = CrashCopy();
    fs::resize_file(copy + "/" + fs::path(NewestLog()).filename().string(), bytes);
    return copy;
  }

  int64_t compact_bytes_ = int64_t{64} << 20;
  int64_t log_room_bytes_ = 0;
  std::function<void()> before_group_sync_;
  absl::Duration sync_interval_ = absl::ZeroDuration();
  std::string boot_id_ = "boot-1";
  int copies_ = 0;
  std::string root_;
  std::string dir_;
  ManualClock clock_;
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<CoordinationService> service_;
};

TEST_F(StateStoreTest, AnEmptyDirectoryStartsEmptyAndKeepsTheIncarnation) {
  const uint64_t incarnation = service_->service_incarnation();
  auto saved = Read(CrashCopy());
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->service_incarnation, incarnation);
  EXPECT_EQ(Describe(*saved), Describe(service_->CaptureState()));
  CrashAndRestart();
  EXPECT_EQ(service_->service_incarnation(), incarnation);
}

TEST_F(StateStoreTest, EveryAcknowledgedChangeSurvivesACrash) {
  // The register barrier, open with some tasks waiting.
  StatusResult w0 = Register(kW0, 11);
  ASSERT_TRUE(Register(kS0, 21).value().ok());
  ExpectSurvivesCrash("register barrier open, one task waiting, one sidecar connected");
  StatusResult w1 = Register(kW1, 12);
  StatusResult w2 = Register(kW2, 13);
  ASSERT_TRUE(w0.value().ok());
  ExpectSurvivesCrash("register barrier passed");

  // Keys: insert, overwrite, increment, recursive delete.
  ASSERT_TRUE(service_->InsertKeyValue("a/x", "1", false).ok());
  ASSERT_TRUE(service_->InsertKeyValue("a/y", std::string("\0bin\xff", 5), false).ok());
  ASSERT_TRUE(service_->InsertKeyValue("b", "2", false).ok());
  ASSERT_TRUE(service_->InsertKeyValue("b", "3", true).ok());
  ASSERT_TRUE(service_->IncrementKeyValue("counter", 5).ok());
  ASSERT_TRUE(service_->IncrementKeyValue("counter", -2).ok());
  ExpectSurvivesCrash("keys written");
  ASSERT_TRUE(service_->DeleteKeyValue("a").ok());
  ExpectSurvivesCrash("directory deleted");

  // Named barriers: passed twice, one open with an arrival, one timed out, one cancelled.
  for (int64_t counter : {0, 1}) {
    auto a = Barrier("step", counter, kW0);
    auto b = Barrier("step", counter, kW1);
    auto c = Barrier("step", counter, kW2);
    ASSERT_TRUE(c.value().ok()) << c.value().status();
  }
  auto open = Barrier("pair", 0, kW0, {kW0, kW1});
  ExpectSurvivesCrash("barriers passed and one open");
  auto late = Barrier("late", 0, kW2, {}, absl::Seconds(1));
  Advance(absl::Seconds(2));
  ASSERT_TRUE(late.fired());
  ASSERT_TRUE(service_->CancelBarrier("never", 0, kW1).ok());
  ExpectSurvivesCrash("a barrier timed out and one cancelled");
  for (const std::string id : {"more-1", "more-2"}) {
    auto a = Barrier(id, 0, kW0, {kW0});
    ASSERT_TRUE(a.value().ok()) << a.value().status();
  }
  ASSERT_EQ(service_->FinishedBarriersKept(), 3u);
  ExpectSurvivesCrash("the oldest finished barriers forgotten");

  // A device exchange.
  std::vector<ValueResult<std::vector<std::string>>> devices(3);
  int i = 0;
  for (const TaskName& t : {kW0, kW1, kW2}) {
    service_->WaitForAllTasks(t, absl::StrCat("gpu-", i), service_->NewWaiterId(),
                              devices[i].Callback());
    ++i;
  }
  ASSERT_TRUE(devices[2].value().ok());
  ExpectSurvivesCrash("devices exchanged");

  // An error that reaches everyone, and a reset.
  ASSERT_TRUE(service_->ReportError(kS1, absl::InternalError("GPU 3 fell off the bus")).ok());
  ExpectSurvivesCrash("an error propagated");
  ASSERT_TRUE(service_->ResetTask(kS1).ok());
  ExpectSurvivesCrash("a task reset");
}

TEST_F(StateStoreTest, ACallCarriedOutBeforeACrashIsAnsweredAsItsFirstAttemptAfterIt) {
  // What a sidecar's proxy sends again after the coordinator came back (request ids, KV-9):
  // each attempt gets its first attempt's answer and changes nothing twice.
  RegisterAll();
  const RequestId incr{"5e55", 1, 1}, insert{"5e55", 2, 1};
  ASSERT_EQ(service_->IncrementKeyValueOnce(incr, "steps", 7).value_or(-1), 7);
  ASSERT_TRUE(service_->InsertKeyValueOnce(insert, "leader", "w0", false).ok());
  ASSERT_TRUE(service_->CancelBarrier("eval", 0, kW1, "5e55/3/1").ok());
  ASSERT_TRUE(service_->ResetTask(kS1, "5e55/4/1").ok());
  ExpectSurvivesCrash("calls with request ids");
  CrashAndRestart();
  const int64_t revision = service_->KeyValueStats().revision;
  const std::string before = Describe(service_->CaptureState());

  EXPECT_EQ(service_->IncrementKeyValueOnce(incr, "steps", 7).value_or(-1), 7);
  EXPECT_TRUE(service_->InsertKeyValueOnce(insert, "leader", "w0", false).ok());
  EXPECT_TRUE(service_->CancelBarrier("eval", 0, kW1, "5e55/3/1").ok());
  EXPECT_TRUE(service_->ResetTask(kS1, "5e55/4/1").ok());
  EXPECT_EQ(service_->KeyValueStats().revision, revision);
  EXPECT_EQ(Describe(service_->CaptureState()), before);
  EXPECT_EQ(service_->TryGetKeyValue("steps").value_or(""), "7");
  // The same calls as new requests (or without an id) get what such a call gets.
  EXPECT_EQ(service_->IncrementKeyValueOnce({"5e55", 5, 5}, "steps", 7).value_or(-1), 14);
  EXPECT_EQ(service_->InsertKeyValueOnce({"5e55", 6, 6}, "leader", "w0", false).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(service_->CancelBarrier("eval", 0, kW1, "5e55/7/7").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(service_->CancelBarrier("eval", 0, kW1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(service_->ResetTask(kS1, "5e55/8/8").code(), absl::StatusCode::kFailedPrecondition);
  // A reset sent again after the task came back changes nothing either.
  ASSERT_TRUE(Register(kS1, 9).value().ok());
  EXPECT_TRUE(service_->ResetTask(kS1, "5e55/4/1").ok());
  EXPECT_EQ(service_->GetTaskStates({kS1}).value()[0].state, TaskState::kConnected);
}

TEST_F(StateStoreTest, TheReasonOfATasksErrorSurvivesARestart) {
  RegisterAll();
  ASSERT_TRUE(service_
                  ->ReportError(kS1, absl::InternalError("GPU 3 fell off the bus"),
                                ErrorReporter::kTheTask, FailureReason::kGpuFault)
                  .ok());
  ExpectSurvivesCrash("a GPU fault reported");
  CrashAndRestart();

  EXPECT_EQ(Info(kS1).state, TaskState::kError);
  EXPECT_EQ(Info(kS1).reason, FailureReason::kGpuFault);
}

// Rewrites every state file of `dir` as a coordinator that kept no reasons wrote it: its task
// records without the reason field.
void WriteAsBeforeReasons(const std::string& dir) {
  namespace internal = state_store_internal;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!absl::StartsWith(name, "log-") && !absl::StartsWith(name, "snapshot-")) continue;
    internal::FrameReader reader(e.path().string());
    ASSERT_TRUE(reader.Open().ok());
    std::string data, payload;
    for (bool header = true;; header = false) {
      auto next = reader.Next(&payload);
      ASSERT_TRUE(next.ok()) << next.status();
      if (*next != internal::FrameReader::Result::kFrame) break;  // the end, or a log's room
      if (header) {
        internal::pb::Header h;
        ASSERT_TRUE(h.ParseFromString(payload));
        internal::AppendFrame(h, &data);
        continue;
      }
      internal::pb::Record record;
      ASSERT_TRUE(record.ParseFromString(payload));
      if (record.has_task()) record.mutable_task()->clear_reason();
      internal::AppendFrame(record, &data);
    }
    std::ofstream(e.path(), std::ios::binary | std::ios::trunc) << data;
  }
}

TEST_F(StateStoreTest, StateWrittenBeforeReasonsWereKeptRestoresItsErrorsWithoutOne) {
  RegisterAll();
  ASSERT_TRUE(service_
                  ->ReportError(kS1, absl::UnavailableError("worker 1 exited"),
                                ErrorReporter::kTheTask, FailureReason::kWorkloadExit)
                  .ok());
  std::string copy = CrashCopy();
  WriteAsBeforeReasons(copy);
  RestartFrom(copy);

  EXPECT_EQ(Info(kS1).state, TaskState::kError);
  EXPECT_TRUE(absl::StrContains(Info(kS1).error.message(), "worker 1 exited"));
  EXPECT_EQ(Info(kS1).reason, FailureReason::kUnspecified);
  EXPECT_EQ(Info(kW0).state, TaskState::kConnected);
}

TEST_F(StateStoreTest, ARestartedServiceCarriesOnWhereTheOldOneStopped) {
  RegisterAll();
  ASSERT_TRUE(service_->InsertKeyValue("model/config", "lr=0.1", false).ok());
  for (const TaskName& t : {kW0, kW1, kW2}) Barrier("epoch", 0, t);
  auto open = Barrier("eval", 0, kW0);
  const int64_t revision = service_->KeyValueStats().revision;
  const uint64_t incarnation = service_->service_incarnation();

  CrashAndRestart();
  EXPECT_EQ(service_->service_incarnation(), incarnation);
  // Tasks are still connected with their incarnations; a retried registration is answered.
  for (const TaskName& t : {kW0, kW1, kW2, kS0, kS1}) {
    EXPECT_EQ(Info(t).state, TaskState::kConnected) << t.ToString();
    EXPECT_EQ(Info(t).incarnation, 7u);
  }
  auto again = Register(kW1, 7);
  ASSERT_TRUE(again.fired());
  EXPECT_TRUE(again.value().ok()) << again.value();
  EXPECT_TRUE(service_->Heartbeat(kW2, 7).ok());
  // Keys, and revisions that go on from where they were.
  EXPECT_EQ(service_->TryGetKeyValue("model/config").value_or(""), "lr=0.1");
  ASSERT_TRUE(service_->InsertKeyValue("next", "x", false).ok());
  EXPECT_EQ(service_->KeyValueStats().revision, revision + 1);
  // A finished barrier answers a repeated call from its result; the open one completes.
  auto repeated = Barrier("epoch", 0, kW2);
  ASSERT_TRUE(repeated.fired());
  EXPECT_EQ(repeated.value().value_or(-1), 0);
  auto b = Barrier("eval", 0, kW1);
  auto c = Barrier("eval", 0, kW2);
  ASSERT_TRUE(c.fired());
  EXPECT_EQ(c.value().value_or(-1), 0) << c.value().status();
  // Connected tasks have a whole heartbeat timeout from the restart to show up.
  Advance(absl::Seconds(99));
  EXPECT_EQ(Info(kW0).state, TaskState::kConnected);
  ASSERT_TRUE(service_->Heartbeat(kW0, 7).ok());
  Advance(absl::Seconds(2));
  EXPECT_EQ(Info(kW1).state, TaskState::kError);
  EXPECT_EQ(Info(kW0).state, TaskState::kConnected);
}

TEST_F(StateStoreTest, AStopFailsNothingThatARestartWouldFind) {
  RegisterAll();
  auto open = Barrier("checkpoint", 0, kW0);
  const std::string before = Describe(service_->CaptureState());
  service_->Stop(absl::UnavailableError("SIGTERM"));
  ASSERT_TRUE(open.fired());
  EXPECT_FALSE(open.value().ok());
  auto saved = Read(CrashCopy());
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(Describe(*saved), before);
}

TEST_F(StateStoreTest, ALongLogIsReplacedByASnapshot) {
  Shutdown();
  fs::remove_all(dir_);
  compact_bytes_ = 2048;
  StartFresh();
  RegisterAll();
  // Compaction runs in the background: the writes go on (at least 400) until it has
  // happened more than once; a log that stops growing is not compacted again.
  for (int i = 0; i < 400 || (store_->GetStats().snapshots < 3 && i < 40000); ++i) {
    ASSERT_TRUE(
        service_->InsertKeyValue(absl::StrCat("k/", i % 50), std::string(40, 'v'), true).ok());
    if (i % 7 == 0) {
      ASSERT_TRUE(service_->DeleteKeyValue(absl::StrCat("k/", i % 50)).ok());
    }
    if (i % 50 == 0) ExpectSurvivesCrash(absl::StrCat("after ", i, " writes"));
  }
  EXPECT_GE(store_->GetStats().snapshots, 3);
  ExpectSurvivesCrash("after compactions");
  int snapshots = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    snapshots += absl::StartsWith(e.path().filename().string(), "snapshot-");
  }
  EXPECT_LE(snapshots, 2);  // older generations are removed
}

// The log's room is written ahead of its changes (zeros, a few KiB at a time here), a crash
// anywhere reads back everything saved, and a stopped store cuts its log to its end.
TEST_F(StateStoreTest, TheLogIsWrittenAheadOfItsChangesAndCutToItsEndWhenClosed) {
  Shutdown();
  fs::remove_all(dir_);
  log_room_bytes_ = 4096;
  StartFresh();
  RegisterAll();
  for (int i = 0; i < 24; ++i) {
    SCOPED_TRACE(absl::StrCat("change ", i));
    ASSERT_TRUE(
        service_->InsertKeyValue(absl::StrCat("k", i), std::string(700, 'a' + i % 26), false).ok());
    const uintmax_t end = LogEnd();
    const std::string log = NewestLog();
    const uintmax_t size = fs::file_size(log);
    ASSERT_GT(size, end) << "room after the changes";
    ASSERT_LE(size, end + 4096);
    std::ifstream in(log, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(end));
    std::string room(size - end, 'x');
    in.read(room.data(), static_cast<std::streamsize>(room.size()));
    ASSERT_EQ(room, std::string(size - end, '\0'));
    if (i % 6 == 5) ExpectSurvivesCrash("room after the log");
  }
  const std::string expected = Describe(service_->CaptureState());
  const std::string log = NewestLog();
  store_->Stop();
  const uintmax_t closed = fs::file_size(log);
  EXPECT_GT(closed, 24 * 700u);
  EXPECT_EQ(closed, static_cast<uintmax_t>(store_->GetStats().written_log_bytes));
  auto saved = Read(CrashCopy());
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(Describe(*saved), expected);
}

// A compaction cuts the log it replaces to its end after the switch; a crash before that
// leaves its room, which reads as room although a later log follows.
TEST_F(StateStoreTest, TheRoomOfALogThatALaterLogFollowsIsNotDamage) {
  RegisterAll();
  ASSERT_TRUE(service_->InsertKeyValue("a", "1", false).ok());
  const uintmax_t end = LogEnd();
  const std::string copy = CrashCopy();
  const std::string name = fs::path(NewestLog()).filename().string();
  ASSERT_GT(fs::file_size(copy + "/" + name), end) << "room left after the log";
  // The later log, as the compaction began it: its header, then a change.
  const int64_t next = std::stoll(name.substr(4)) + 1;
  std::string data;
  state::v1::Header header;
  header.set_format(state_store_internal::kFormat);
  header.set_kind(state::v1::Header::LOG);
  header.set_generation(static_cast<uint64_t>(next));
  header.set_service_incarnation(service_->service_incarnation());
  state_store_internal::AppendFrame(header, &data);
  state_store_internal::AppendFrame(state_store_internal::KeyPutRecord("b", "2", 1000), &data);
  {
    std::ofstream out(absl::StrCat(copy, "/log-", next), std::ios::binary);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  auto saved = Read(copy);
  ASSERT_TRUE(saved.ok()) << saved.status();
  std::vector<std::string> keys;
  for (const DurableKey& k : saved->keys) keys.push_back(absl::StrCat(k.key, "=", k.value));
  EXPECT_EQ(absl::StrJoin(keys, ","), "a=1,b=2");
}

TEST_F(StateStoreTest, ARecordCutShortByACrashIsDropped) {
  RegisterAll();
  ASSERT_TRUE(service_->InsertKeyValue("kept", "1", false).ok());
  const std::string expected = Describe(service_->CaptureState());
  std::string copy = CrashCopy();
  std::string log = copy + "/" + fs::path(NewestLog()).filename().string();
  const auto size = LogEnd();
  fs::resize_file(log, size);  // a log that ran out of room, grown by its writes
  {
    std::ofstream out(log, std::ios::binary | std::ios::app);
    out.write("\x30\x00\x00\x00\x01\x02", 6);  // a header promising 48 bytes, then nothing
  }
  auto saved = Read(copy);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(Describe(*saved), expected);
  EXPECT_EQ(fs::file_size(log), size);
}

// What a crash of the machine can leave at the end of the newest log, each read back as the
// state before the torn writes (and the file cut back to where they began).
TEST_F(StateStoreTest, EveryKindOfTornTailIsDroppedAndTheStateBeforeItComesUp) {
  RegisterAll();
  ASSERT_TRUE(service_->InsertKeyValue("kept", "1", false).ok());
  const std::string before = Describe(service_->CaptureState());
  const uintmax_t size_before = LogEnd();
  // The last write: a record of a few sectors (its value 3,000 bytes, not zeros).
  ASSERT_TRUE(service_->InsertKeyValue("torn", std::string(3000, 'v'), false).ok());
  const uintmax_t size_after = LogEnd();
  ASSERT_GT(size_after - size_before, 3 * 512u);
  const std::string after = Describe(service_->CaptureState());
  const std::string log_name = fs::path(NewestLog()).filename().string();
  const std::string crashed = CrashCopy();
  int copies = 0;
  // A copy of the crashed state whose newest log `change` edits.
  auto with = [&](const std::function<void(std::fstream&)>& change) {
    std::string copy = absl::StrCat(root_, "/torn-", ++copies);
    fs::copy(crashed, copy);
    std::fstream f(copy + "/" + log_name, std::ios::binary | std::ios::in | std::ios::out);
    change(f);
    return copy;
  };
  auto zeros_at = [](std::fstream& f, uintmax_t at, size_t n) {
    f.seekp(static_cast<std::streamoff>(at));
    const std::string zeros(n, '\0');
    f.write(zeros.data(), static_cast<std::streamsize>(n));
  };
  struct Case {
    std::string what;
    std::string copy;
  };
  std::vector<Case> cases;
  // The file grew but nothing was written to it: zeros, 8 bytes (one empty frame's worth) up to
  // many sectors, where the record was.
  for (size_t n : {8, 9, 100, 4096, 70000}) {
    cases.push_back(
        {absl::StrCat(n, " zero bytes in place of the record"), with([&](std::fstream& f) {
           fs::resize_file(absl::StrCat(root_, "/torn-", copies, "/", log_name), size_before);
           zeros_at(f, size_before, n);
         })});
  }
  // The record's header and first sector reached the disk, one of its later sectors did not
  // (the sectors of the file, 512 bytes from its start, that lie wholly inside the record).
  const uintmax_t first_whole = (size_before / 512 + 1) * 512;
  for (uintmax_t sector = first_whole; sector + 512 <= size_after; sector += 512) {
    cases.push_back({absl::StrCat("the record's sector at byte ", sector, " never written"),
                     with([&](std::fstream& f) { zeros_at(f, sector, 512); })});
  }
  // Its last sector, which the file ends inside, not written.
  const uintmax_t last_sector = (size_after - 1) / 512 * 512;
  ASSERT_GE(last_sector, first_whole);
  cases.push_back({"the record's last sector never written", with([&](std::fstream& f) {
                     zeros_at(f, last_sector, size_after - last_sector);
                   })});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto saved = Read(c.copy);
    ASSERT_TRUE(saved.ok()) << saved.status();
    EXPECT_EQ(Describe(*saved), before);
    EXPECT_EQ(fs::file_size(c.copy + "/" + log_name), size_before) << "cut back";
  }
  // Untouched, the record is there.
  auto whole = Read(crashed);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(Describe(*whole), after);
}

TEST_F(StateStoreTest, ANewLogWhoseHeaderNeverReachedTheDiskIsIgnored) {
  RegisterAll();
  ASSERT_TRUE(service_->InsertKeyValue("kept", "1", false).ok());
  const std::string expected = Describe(service_->CaptureState());
  const std::string copy = CrashCopy();
  const std::string newest = fs::path(NewestLog()).filename().string();
  const std::string next = absl::StrCat(copy, "/log-", std::stoll(newest.substr(4)) + 1);
  {
    std::ofstream out(next, std::ios::binary);
    out.write(std::string(4096, '\0').data(), 4096);  // created and grown, never written
  }
  auto saved = Read(copy);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(Describe(*saved), expected);
}

TEST_F(StateStoreTest, ZerosInsideALogThatLaterLogsFollowAreDamage) {
  RegisterAll();
  ASSERT_TRUE(service_->InsertKeyValue("k", std::string(3000, 'v'), false).ok());
  const std::string log = NewestLog();
  const uintmax_t size = LogEnd();
  std::string copy = CrashCopy();
  const std::string name = fs::path(log).filename().string();
  const std::string next = absl::StrCat(copy, "/log-", std::stoll(name.substr(4)) + 1);
  fs::copy_file(copy + "/" + name, next);  // a later log (its header names the wrong one:
  {                                        // the older log's damage is found first)
    std::fstream f(copy + "/" + name, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>((size / 512 - 1) * 512));
    f.write(std::string(512, '\0').data(), 512);
  }
  auto saved = Read(copy);
  ASSERT_FALSE(saved.ok());
  EXPECT_EQ(saved.status().code(), absl::StatusCode::kDataLoss) << saved.status();
  EXPECT_TRUE(absl::StrContains(saved.status().message(), "later logs follow it"))
      << saved.status();
}

// What answered, in order, for tests of the durability gate (answers come from whichever
// thread led the sync that covered them).
class Answers {
 public:
  std::function<void()> Note(const std::string& what) {
    return [this, what] {
      absl::MutexLock lock(&mu_);
      seen_.push_back(what);
    };
  }
  std::string Seen() {
    absl::MutexLock lock(&mu_);
    return absl::StrJoin(seen_, ",");
  }
  // Waits (30 s at most) until `count` answers came.
  std::string AwaitCount(size_t count) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, count]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return seen_.size() >= count; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(30));
    return absl::StrJoin(seen_, ",");
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> seen_ ABSL_GUARDED_BY(mu_);
};

// Group commit: no answer, released wait or watch event goes out before the change it
// follows is synced, and the answers that came while one sync ran share the next one.
TEST_F(StateStoreTest, AnswersWaitForTheSyncOfTheirChangeAndShareTheNextOne) {
  absl::Notification in_sync, go_on;
  std::atomic<int> syncs_seen{0};  // on whichever thread leads a sync
  Shutdown();
  fs::remove_all(dir_);
  before_group_sync_ = [&] {
    if (syncs_seen++ > 0) return;
    in_sync.Notify();
    go_on.WaitForNotification();
  };
  StartFresh();
  LocalBackend backend(service_.get());
  Answers answers;
  auto status_of = [&](const std::string& name) {
    return [note = answers.Note(name)](const absl::Status& s) {
      EXPECT_TRUE(s.ok()) << s;
      note();
    };
  };
  // Parked before anything is waiting: released by the insert of "b" below.
  backend.GetKeyValue(CallContext{service_->NewWaiterId()}, "b", std::nullopt,
                      [note = answers.Note("get b")](const absl::StatusOr<std::string>& v) {
                        EXPECT_EQ(v.value_or("?"), "2");
                        note();
                      });
  auto watch = service_->WatchKeys("", 0, service_->NewWaiterId(), answers.Note("watch"));
  ASSERT_TRUE(watch.ok()) << watch.status();

  // The caller of the first change leads the sync that covers it (held in it here, before
  // its fdatasync): from a thread of its own. Its first answer is the watch's event; the
  // call's own answer it gives once it is done leading. The calls below find a leader and
  // leave their answers to wait for the next sync, which that leader leads too.
  std::thread leader(
      [&] { backend.InsertKeyValue(CallContext{}, "a", "1", false, status_of("insert a")); });
  in_sync.WaitForNotification();
  EXPECT_EQ(answers.Seen(), "");
  EXPECT_TRUE((*watch)->Take(SIZE_MAX).events.empty()) << "a watch saw a change not on disk";
  backend.InsertKeyValue(CallContext{}, "b", "2", false, status_of("insert b"));
  backend.IncrementKeyValue(CallContext{}, "c", 1, [note = answers.Note("add c")](auto v) {
    EXPECT_EQ(v.value_or(-1), 1);
    note();
  });
  // A read of a change not on disk waits for it as well.
  backend.TryGetKeyValue(CallContext{}, "b", [note = answers.Note("read b")](auto v) {
    EXPECT_EQ(v.value_or("?"), "2");
    note();
  });
  // A forwarded TCPStore batch: its GET is read while the batch runs, its replies wait
  // whole.
  std::vector<ForwardedTorchCommand> batch(2);
  for (ForwardedTorchCommand& c : batch) c.client = "rank-0";
  torch::Command set;
  set.query = torch::Query::kSet;
  set.keys = {"t"};
  set.values = {"x"};
  batch[0].sequence = 1;
  batch[0].command = torch::EncodeCommand(set);
  torch::Command get;
  get.query = torch::Query::kGet;
  get.keys = {"t"};
  batch[1].sequence = 2;
  batch[1].command = torch::EncodeCommand(get);
  backend.TorchStoreBatch(
      CallContext{}, batch,
      [note = answers.Note("torch")](
          const absl::StatusOr<std::vector<absl::StatusOr<std::string>>>& replies) {
        ASSERT_TRUE(replies.ok()) << replies.status();
        ASSERT_EQ(replies->size(), 2U);
        EXPECT_EQ((*replies)[1].value_or("?"), torch::testing::Bytes("x"));
        note();
      });
  EXPECT_EQ(answers.Seen(), "");

  go_on.Notify();
  // In the order they were given: a change's watch events and released waits come before
  // the answer to the call that made it (the leader's own answer, given after the others,
  // goes last).
  EXPECT_EQ(answers.AwaitCount(10),
            "watch,get b,watch,insert b,watch,add c,read b,watch,torch,insert a");
  leader.join();
  // "a" in the first sync, everything after it in a second one.
  EXPECT_EQ(store_->GetStats().syncs, 2);
  KeyWatch::Batch events = (*watch)->Take(SIZE_MAX);
  ASSERT_GE(events.events.size(), 4U);  // the batch also writes its client's record
  EXPECT_EQ(events.events[2]->key, "c");
  // Nothing waits now: an answer goes at once, on the caller's thread. (Once the leader is
  // done with its batch: it is still marked busy for a moment after running the last answer,
  // and an answer given then queues behind it. Each try waits for its answer.)
  bool at_once = false;
  for (int tries = 0; tries < 1000 && !at_once; ++tries) {
    absl::Notification ran;
    const std::thread::id caller = std::this_thread::get_id();
    store_->AfterDurable([&] {
      at_once = std::this_thread::get_id() == caller;
      ran.Notify();
    });
    ran.WaitForNotification();
  }
  EXPECT_TRUE(at_once);
  (*watch)->Detach();
  ExpectSurvivesCrash("after the answers");
}

// A crash of the whole machine keeps of the log what was synced. The moment a change is
// answered, the synced part of the log holds it: cut there, the log still brings it back. In
// the faster mode it does not (answered before its sync: what the test exists to catch).
TEST_F(StateStoreTest, EveryAnsweredChangeIsInThePartOfTheLogOnDisk) {
  for (bool faster : {false, true}) {
    SCOPED_TRACE(faster ? "faster mode" : "default mode");
    Shutdown();
    fs::remove_all(dir_);
    sync_interval_ = faster ? absl::Hours(1) : absl::ZeroDuration();
    StartFresh();
    LocalBackend backend(service_.get());
    constexpr int kChanges = 20;
    absl::Mutex mu;
    std::vector<int64_t> on_disk(kChanges, -1);  // the synced log bytes when each was answered
    int answered = 0;
    for (int i = 0; i < kChanges; ++i) {
      backend.InsertKeyValue(CallContext{}, absl::StrCat("k", i), "v", false,
                             [&, i](const absl::Status& s) {
                               EXPECT_TRUE(s.ok()) << s;
                               const int64_t synced = store_->GetStats().synced_log_bytes;
                               absl::MutexLock lock(&mu);
                               on_disk[i] = synced;
                               ++answered;
                             });
    }
    {
      absl::MutexLock lock(&mu);
      auto all = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return answered == kChanges; };
      ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(30)));
    }
    std::vector<std::string> lost;
    for (int i = 0; i < kChanges; ++i) {
      auto saved = Read(CutCopy(static_cast<uintmax_t>(on_disk[i])));
      ASSERT_TRUE(saved.ok()) << saved.status();
      const std::string key = absl::StrCat("k", i);
      if (std::none_of(saved->keys.begin(), saved->keys.end(),
                       [&](const DurableKey& k) { return k.key == key; })) {
        lost.push_back(key);
      }
    }
    if (faster) {
      EXPECT_EQ(lost.size(), static_cast<size_t>(kChanges));
    } else {
      EXPECT_TRUE(lost.empty()) << "answered, then lost with the machine: "
                                << absl::StrJoin(lost, ",");
    }
  }
}

// The opt-in faster mode answers before its changes are synced: a log it left unclosed, read
// after the machine restarted, may lack what was acknowledged, so the state comes back under
// a new service incarnation (every client sees a restart). The same log read in the same
// boot, a log it closed, and a log of the default mode keep the incarnation.
TEST_F(StateStoreTest, AFasterModeLogUnclosedAcrossARebootStartsANewServiceIncarnation) {
  struct Case {
    const char* name;
    absl::Duration interval;
    bool stopped;
    const char* read_in_boot;
    bool new_incarnation;
  };
  for (const Case& c :
       {Case{"faster, unclosed, rebooted", absl::Seconds(1), false, "boot-2", true},
        Case{"faster, unclosed, same boot", absl::Seconds(1), false, "boot-1", false},
        Case{"faster, closed, rebooted", absl::Seconds(1), true, "boot-2", false},
        Case{"default, unclosed, rebooted", absl::ZeroDuration(), false, "boot-2", false}}) {
    SCOPED_TRACE(c.name);
    Shutdown();
    fs::remove_all(dir_);
    sync_interval_ = c.interval;
    boot_id_ = "boot-1";
    StartFresh();
    ASSERT_TRUE(service_->InsertKeyValue("k", "v", false).ok());
    const uint64_t incarnation = service_->service_incarnation();
    if (c.stopped) store_->Stop();
    const std::string copy = CrashCopy();
    boot_id_ = c.read_in_boot;
    auto saved = Read(copy);
    ASSERT_TRUE(saved.ok()) << saved.status();
    EXPECT_EQ(saved->service_incarnation != incarnation, c.new_incarnation);
    EXPECT_NE(saved->service_incarnation, 0U);
    ASSERT_EQ(saved->keys.size(), 1U);  // what was saved comes back either way
    EXPECT_EQ(saved->keys[0].value, "v");
  }
}

TEST(AutoCompactBytesTest, AnEighthOfTheVolumeFrom1To64MiB) {
  EXPECT_EQ(AutoCompactBytes(int64_t{64} << 20), int64_t{8} << 20) << "a 64Mi claim";
  EXPECT_EQ(AutoCompactBytes(int64_t{1} << 30), int64_t{64} << 20);
  EXPECT_EQ(AutoCompactBytes(int64_t{1} << 40), int64_t{64} << 20);
  EXPECT_EQ(AutoCompactBytes(int64_t{4} << 20), int64_t{1} << 20);
  EXPECT_EQ(AutoCompactBytes(0), int64_t{1} << 20);
}

TEST(LogRoomBytesTest, ASixteenthOfTheCompactionLengthFrom64KiBTo4MiB) {
  EXPECT_EQ(LogRoomBytes(int64_t{8} << 20), int64_t{512} << 10) << "a 64Mi claim";
  EXPECT_EQ(LogRoomBytes(int64_t{64} << 20), int64_t{4} << 20);
  EXPECT_EQ(LogRoomBytes(int64_t{1} << 40), int64_t{4} << 20);
  EXPECT_EQ(LogRoomBytes(int64_t{1} << 20), int64_t{64} << 10);
  EXPECT_EQ(LogRoomBytes(0), int64_t{64} << 10);
}

TEST_F(StateStoreTest, CompactsAtTheSizeGivenOrByTheVolumeAndRefusesANegativeOne) {
  EXPECT_EQ(store_->GetStats().compact_bytes, int64_t{64} << 20) << "the fixture's own";
  Shutdown();
  struct statvfs vs {};
  ASSERT_EQ(statvfs(root_.c_str(), &vs), 0);
  StateStoreOptions options = Options(root_ + "/by-volume");
  options.compact_bytes = 0;
  std::optional<DurableState> restored;
  auto store = StateStore::Open(options, Config(), &restored);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(
      (*store)->GetStats().compact_bytes,
      AutoCompactBytes(static_cast<int64_t>(vs.f_blocks) * static_cast<int64_t>(vs.f_frsize)));
  options.dir = root_ + "/negative";
  options.compact_bytes = -1;
  auto refused = StateStore::Open(options, Config(), &restored);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
}

TEST_F(StateStoreTest, ChangesMadeAsOneAreRestoredWholeOrNotAtAll) {
  ASSERT_TRUE(service_->InsertKeyValue("count", "4", false).ok());
  ASSERT_TRUE(service_->InsertKeyValue("gone", "x", false).ok());
  const std::string before = Describe(service_->CaptureState());
  const uintmax_t size_before = LogEnd();
  service_->KeyValueAtomically([](KeyValueStore::Batch& kv) {
    ASSERT_TRUE(kv.Increment("count", 1).ok());
    ASSERT_TRUE(kv.Insert("record", "5", false).ok());
    ASSERT_TRUE(kv.Erase("gone").ok());
    ASSERT_TRUE(kv.QueuePush("q", "item").ok());
  });
  const std::string after = Describe(service_->CaptureState());
  const uintmax_t size_after = LogEnd();
  ASSERT_NE(before, after);
  ASSERT_GT(size_after, size_before);
  // Cut anywhere inside what the batch wrote, the log gives the state before it; whole, the
  // state after it. Nothing in between.
  for (uintmax_t cut = size_before; cut < size_after; ++cut) {
    auto saved = Read(CutCopy(cut));
    ASSERT_TRUE(saved.ok()) << "cut at " << cut << ": " << saved.status();
    ASSERT_EQ(Describe(*saved), before) << "cut at " << cut << " of " << size_after;
  }
  auto saved = Read(CrashCopy());
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(Describe(*saved), after);
}

TEST_F(StateStoreTest, AForwardedTorchCommandIsCarriedOutOnceWhereverACrashCutsTheLog) {
  using torch::Command;
  using torch::Query;
  auto forward = [this](uint64_t sequence, const Command& command) {
    torch::ForwardedCommands commands(service_.get());
    torch::ForwardedCommand request;
    request.client = "rank-0";
    request.sequence = sequence;
    request.command = torch::EncodeCommand(command);
    std::optional<absl::StatusOr<std::string>> reply;
    commands.Execute(service_->NewWaiterId(), request,
                     [&reply](absl::StatusOr<std::string> r) { reply = std::move(r); });
    EXPECT_TRUE(reply.has_value()) << "no answer at once";
    return reply.value_or(absl::InternalError("no answer"));
  };
  Command set;
  set.query = Query::kSet;
  set.keys = {"count"};
  set.values = {"5"};
  ASSERT_TRUE(forward(1, set).ok());
  Command add;
  add.query = Query::kAdd;
  add.keys = {"count"};
  add.number = 1;
  const uintmax_t size_before = LogEnd();
  absl::StatusOr<std::string> first = forward(2, add);
  ASSERT_TRUE(first.ok()) << first.status();
  const uintmax_t size_after = LogEnd();
  // The answer was lost with the coordinator, and the sidecar sends the ADD again to the one
  // that restarted from whatever the log held: it counts once, and answers as the first time.
  const std::string log = fs::path(NewestLog()).filename().string();
  const std::string crashed = CrashCopy();
  for (uintmax_t cut = size_before; cut <= size_after; ++cut) {
    SCOPED_TRACE(absl::StrCat("log cut at ", cut, " of ", size_after));
    std::string copy = absl::StrCat(root_, "/cut-", cut);
    fs::copy(crashed, copy);
    fs::resize_file(copy + "/" + log, cut);
    RestartFrom(copy);
    if (HasFatalFailure()) return;
    absl::StatusOr<std::string> again = forward(2, add);
    ASSERT_TRUE(again.ok()) << again.status();
    ASSERT_EQ(*again, *first);
    ASSERT_EQ(service_->TryGetKeyValue(torch::StoreKey("count")).value_or("<absent>"), "6");
  }
}

TEST_F(StateStoreTest, ADamagedRecordRefusesTheStart) {
  RegisterAll();
  ASSERT_TRUE(service_->InsertKeyValue("key", "value", false).ok());
  std::string copy = CrashCopy();
  std::string log = copy + "/" + fs::path(NewestLog()).filename().string();
  {
    std::fstream f(log, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(LogEnd()) - 3);  // inside the last record
    f.put('\x7f');
  }
  auto saved = Read(copy);
  ASSERT_FALSE(saved.ok());
  EXPECT_EQ(saved.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(saved.status().message(), "is damaged at byte")) << saved.status();
  EXPECT_TRUE(absl::StrContains(saved.status().message(), "checksum")) << saved.status();
}

TEST_F(StateStoreTest, RefusesTheStateOfOtherJobs) {
  ServiceConfig other = Config();
  other.jobs[0].num_tasks = 4;
  auto saved = Read(CrashCopy(), other);
  ASSERT_FALSE(saved.ok());
  EXPECT_EQ(saved.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(saved.status().message(),
                                "other jobs (sidecar=2 (auxiliary), "
                                "worker=3; this one has sidecar=2 "
                                "(auxiliary), worker=4)"))
      << saved.status();
}

TEST_F(StateStoreTest, RefusesAnotherServiceIncarnation) {
  std::string copy = CrashCopy();
  std::optional<DurableState> restored;
  auto store = StateStore::Open(Options(copy), Config(), &restored);
  ASSERT_TRUE(store.ok()) << store.status();
  ServiceConfig config = Config();
  config.service_incarnation = service_->service_incarnation() + 1;
  auto service = CoordinationService::Create(config, &clock_, nullptr, store->get(), &*restored);
  ASSERT_FALSE(service.ok());
  EXPECT_TRUE(absl::StrContains(service.status().message(), "belongs to service incarnation"))
      << service.status();
}

TEST_F(StateStoreTest, RefusesADirectoryInUse) {
  std::optional<DurableState> restored;
  auto second = StateStore::Open(Options(dir_), Config(), &restored);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::StrContains(second.status().message(), "in use by another coordinator"))
      << second.status();
}

TEST_F(StateStoreTest, RefusesALogWithoutItsSnapshotOrWithAGap) {
  std::string copy = CrashCopy();
  for (const auto& e : fs::directory_iterator(copy)) {
    if (absl::StartsWith(e.path().filename().string(), "snapshot-")) {
      fs::remove(e.path());
    }
  }
  auto saved = Read(copy);
  ASSERT_FALSE(saved.ok());
  EXPECT_TRUE(absl::StrContains(saved.status().message(), "but no snapshot")) << saved.status();

  copy = CrashCopy();
  std::string log = fs::path(NewestLog()).filename().string();
  const int64_t g = std::stoll(log.substr(4));
  fs::copy_file(copy + "/" + log, absl::StrCat(copy, "/log-", g + 2));
  saved = Read(copy);
  ASSERT_FALSE(saved.ok());
  EXPECT_TRUE(absl::StrContains(saved.status().message(), absl::StrCat("lacks log-", g + 1)))
      << saved.status();
}

}  // namespace
}  // namespace cohort
