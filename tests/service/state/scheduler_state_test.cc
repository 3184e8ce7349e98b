// The task runtime scheduler's durability: what it tells its journal, read back (through the
// records of the state files) into a new scheduler, gives the same scheduler; a restored one
// sends again what the old one may not have sent; repeated calls take effect once; and the
// scheduler's state goes through a real --state-dir with the coordinator's.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cohort/state/v1/state.pb.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "runtime/scheduler/task_scheduler.h"
#include "service/core/coordination_service.h"
#include "service/state/scheduler_records.h"
#include "service/state/state_store.h"
#include "tests/support/eventually.h"

namespace cohort {
namespace {

namespace fs = std::filesystem;
namespace rt = ::cohort::runtime;

// Keeps every set of changes as the state files would: a record, serialized.
class RecordingJournal : public rt::SchedulerJournal {
 public:
  void SchedulerChanged(const rt::SchedulerChanges& changes) override {
    state::v1::SchedulerChanges record;
    SchedulerChangesToProto(changes, &record);
    records_.push_back(record.SerializeAsString());
  }
  // Every record so far, read back into `scheduler`.
  void ReplayInto(rt::TaskScheduler& scheduler) const {
    for (const std::string& bytes : records_) {
      state::v1::SchedulerChanges record;
      ASSERT_TRUE(record.ParseFromString(bytes));
      absl::StatusOr<rt::SchedulerChanges> changes = SchedulerChangesFromProto(record);
      ASSERT_TRUE(changes.ok()) << changes.status();
      scheduler.Restore(*changes);
    }
  }
  size_t size() const { return records_.size(); }

 private:
  std::vector<std::string> records_;
};

// The whole durable state, as text: two schedulers are the same when their texts are.
std::string Describe(const rt::TaskScheduler& scheduler) {
  state::v1::SchedulerChanges record;
  SchedulerChangesToProto(scheduler.CaptureState(), &record);
  return record.DebugString();
}

rt::SchedulerOptions Options() {
  rt::SchedulerOptions options;
  options.max_task_retries = 2;
  return options;
}

template <typename T>
std::vector<T> Drain(rt::TaskScheduler& scheduler) {
  std::vector<T> out;
  for (rt::Effect& e : scheduler.TakeEffects()) {
    if (auto* t = std::get_if<T>(&e)) out.push_back(std::move(*t));
  }
  return out;
}

class SchedulerStateTest : public ::testing::Test {
 protected:
  SchedulerStateTest() : scheduler_(clock_, Options()) { scheduler_.SetJournal(&journal_); }

  rt::WorkerId AddWorker(rt::TaskScheduler& s, const std::string& store, const std::string& addr) {
    auto r = s.RegisterWorker("127.0.0.1", store, false, addr);
    EXPECT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(s.ReadyForNewTask(r->worker, std::nullopt).ok());
    EXPECT_TRUE(s.RegisterFunction(r->worker, "f", 1).ok());
    EXPECT_TRUE(s.RegisterFunction(r->worker, "pair", 2).ok());
    return r->worker;
  }

  // A scheduler in the middle of things: tasks done, running, queued and waiting for their
  // arguments; puts, aliases, contained ids, a failed task, a lost store and its rebuild,
  // deliveries under way, numbered calls.
  void Busy() {
    store_a_ = *scheduler_.RegisterObjStore("127.0.0.1:7001");
    store_b_ = *scheduler_.RegisterObjStore("127.0.0.2:7001");
    store_c_ = *scheduler_.RegisterObjStore("127.0.0.3:7001");
    ASSERT_TRUE(scheduler_.ExportFunction("fn-one").ok());
    worker_a_ = AddWorker(scheduler_, "127.0.0.1:7001", "127.0.0.1:9001");
    worker_b_ = AddWorker(scheduler_, "127.0.0.2:7001", "127.0.0.2:9001");
    ASSERT_TRUE(scheduler_.ExportFunction("fn-two").ok());
    ASSERT_TRUE(scheduler_.ExportReusableVariable("var-one").ok());
    driver_ = scheduler_.RegisterWorker("127.0.0.2", "127.0.0.2:7001", true, "")->worker;

    // A put, stored at a; a task of it, done on b (the put delivered there first).
    put_ = *scheduler_.PutObj(driver_, {driver_, 1});
    ASSERT_TRUE(scheduler_.ObjReady(put_, store_a_, 100).ok());
    auto first = scheduler_.SubmitTask(driver_, {"f", {{put_, ""}}, {}}, {driver_, 2});
    ASSERT_TRUE(first.ok());
    done_ = first->results[0];
    for (const auto& run : Drain<rt::ExecuteTaskEffect>(scheduler_)) {
      ASSERT_TRUE(scheduler_.ObjReady(done_, workers_store(run.worker), 8).ok());
      ASSERT_TRUE(
          scheduler_.ReadyForNewTask(run.worker, rt::FinishedTask{true, "", run.operation}).ok());
    }
    // A task that fails.
    auto failing = scheduler_.SubmitTask(driver_, {"f", {{0, "v"}}, {}}, {driver_, 3});
    ASSERT_TRUE(failing.ok());
    for (const auto& run : Drain<rt::ExecuteTaskEffect>(scheduler_)) {
      ASSERT_TRUE(
          scheduler_.ReadyForNewTask(run.worker, rt::FinishedTask{false, "boom", run.operation})
              .ok());
    }
    // A task whose only copy of its result, and a put whose only copy, are at store c.
    auto second = scheduler_.SubmitTask(driver_, {"f", {{0, "w"}}, {}}, {driver_, 50});
    ASSERT_TRUE(second.ok());
    for (const auto& run : Drain<rt::ExecuteTaskEffect>(scheduler_)) {
      ASSERT_TRUE(scheduler_.ObjReady(second->results[0], store_c_, 8).ok());
      ASSERT_TRUE(
          scheduler_.ReadyForNewTask(run.worker, rt::FinishedTask{true, "", run.operation}).ok());
    }
    rt::ObjectId only_at_c = *scheduler_.PutObj(driver_, {driver_, 51});
    ASSERT_TRUE(scheduler_.ObjReady(only_at_c, store_c_, 8).ok());
    // Aliases and contained ids.
    alias_ = *scheduler_.PutObj(driver_, {driver_, 4});
    ASSERT_TRUE(scheduler_.AliasObjectIDs(alias_, done_).ok());
    ASSERT_TRUE(scheduler_.AddContainedObjectIDs(put_, {done_}, {driver_, 5}).ok());
    ASSERT_TRUE(scheduler_.IncrementRefCount({put_, put_}, {driver_, 6}).ok());
    ASSERT_TRUE(scheduler_.DecrementRefCount({put_}, {driver_, 7}).ok());
    // The driver's store asks for the alias: a delivery under way, with an alias to announce.
    ASSERT_TRUE(scheduler_.RequestObj(driver_, alias_).ok());
    // Two tasks running (one each) and one queued; one waits on an object nobody has yet.
    pending_ = *scheduler_.PutObj(driver_, {driver_, 8});
    // The driver's store waits for an object that is nowhere yet.
    ASSERT_TRUE(scheduler_.RequestObj(driver_, pending_).ok());
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(scheduler_
                      .SubmitTask(driver_, {"pair", {{0, "x"}}, {}},
                                  {driver_, static_cast<uint64_t>(9 + 2 * i)})
                      .ok());
      ASSERT_TRUE(scheduler_
                      .SubmitTask(driver_, {"f", {{pending_, ""}}, {}},
                                  {driver_, static_cast<uint64_t>(10 + 2 * i)})
                      .ok());
    }
    // A store is lost: what only it held is rebuilt from its lineage, or reads as lost.
    scheduler_.StoreLost(store_c_, "test");
  }

  rt::StoreId workers_store(rt::WorkerId w) { return w == worker_a_ ? store_a_ : store_b_; }

  ManualClock clock_;
  RecordingJournal journal_;
  rt::TaskScheduler scheduler_;
  rt::StoreId store_a_ = 0, store_b_ = 0, store_c_ = 0;
  rt::WorkerId worker_a_ = 0, worker_b_ = 0, driver_ = 0;
  rt::ObjectId put_ = 0, done_ = 0, alias_ = 0, pending_ = 0;
};

TEST_F(SchedulerStateTest, TheJournalReadBackGivesTheSameScheduler) {
  Busy();
  ASSERT_GT(journal_.size(), 20u);
  rt::TaskScheduler restored(clock_, Options());
  journal_.ReplayInto(restored);
  EXPECT_EQ(Describe(restored), Describe(scheduler_));
  // The views clients see, too.
  EXPECT_EQ(restored.TaskInfo().succeeded, scheduler_.TaskInfo().succeeded);
  EXPECT_EQ(restored.TaskInfo().failed.size(), 1u);
  EXPECT_EQ(restored.SchedulerInfo().reference_count, scheduler_.SchedulerInfo().reference_count);
  EXPECT_EQ(restored.Stats().tasks_submitted, 9u);
  EXPECT_EQ(restored.Stats().tasks_rebuilt, 1u);
  EXPECT_EQ(restored.Stats().objects_lost, 1u);
  EXPECT_EQ(restored.Stats().tasks_running, scheduler_.Stats().tasks_running);
}

TEST_F(SchedulerStateTest, ASnapshotInSmallRecordsGivesTheSameScheduler) {
  Busy();
  rt::TaskScheduler restored(clock_, Options());
  int records = 0;
  SplitSchedulerState(scheduler_.CaptureState(), 64, [&](const state::v1::SchedulerChanges& r) {
    ++records;
    auto changes = SchedulerChangesFromProto(r);
    ASSERT_TRUE(changes.ok()) << changes.status();
    restored.Restore(*changes);
  });
  EXPECT_GT(records, 10);
  EXPECT_EQ(Describe(restored), Describe(scheduler_));
  // Read twice (a snapshot, then a log that repeats what it holds): still the same.
  journal_.ReplayInto(restored);
  EXPECT_EQ(Describe(restored), Describe(scheduler_));
}

TEST_F(SchedulerStateTest, ARestoredSchedulerSendsAgainWhatTheOldOneMayNotHaveSent) {
  Busy();
  (void)scheduler_.TakeEffects();
  rt::TaskScheduler restored(clock_, Options());
  journal_.ReplayInto(restored);
  ASSERT_TRUE(restored.FinishRestore().ok());
  std::vector<rt::Effect> effects = restored.TakeEffects();
  int executes = 0, deliveries = 0, aliases = 0, imports = 0, variables = 0;
  for (const rt::Effect& e : effects) {
    if (const auto* run = std::get_if<rt::ExecuteTaskEffect>(&e)) {
      ++executes;
      EXPECT_NE(run->operation, 0u);
    }
    if (std::holds_alternative<rt::DeliverEffect>(e)) ++deliveries;
    if (const auto* a = std::get_if<rt::NotifyAliasEffect>(&e)) {
      ++aliases;
      EXPECT_EQ(a->alias, alias_);
      EXPECT_EQ(a->canonical, done_);
    }
    if (std::holds_alternative<rt::ImportFunctionEffect>(e)) ++imports;
    if (std::holds_alternative<rt::ImportReusableVariableEffect>(e)) ++variables;
  }
  EXPECT_EQ(executes, 2);  // the two running tasks, one per worker
  EXPECT_GE(deliveries, 1);
  EXPECT_GE(aliases, 1);
  EXPECT_EQ(imports, 4);  // both exports to both workers
  EXPECT_EQ(variables, 2);
  // The running tasks end as they would have: their workers report, and the queue moves on.
  for (const rt::Effect& e : effects) {
    const auto* run = std::get_if<rt::ExecuteTaskEffect>(&e);
    if (run == nullptr) continue;
    for (rt::ObjectId r : run->task.results) {
      ASSERT_TRUE(restored.ObjReady(r, workers_store(run->worker), 4).ok());
    }
    ASSERT_TRUE(
        restored.ReadyForNewTask(run->worker, rt::FinishedTask{true, "", run->operation}).ok());
  }
  // The queued task and the rebuild of the lost result.
  EXPECT_EQ(Drain<rt::ExecuteTaskEffect>(restored).size(), 2u);
  EXPECT_EQ(restored.Stats().tasks_succeeded, 4u);
}

TEST_F(SchedulerStateTest, ARepeatedCallTakesEffectOnceAlsoAfterARestore) {
  Busy();
  // SubmitTask sent again with its number: the same results, no second task.
  auto again = scheduler_.SubmitTask(driver_, {"f", {{put_, ""}}, {}}, {driver_, 2});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->results, std::vector<rt::ObjectId>{done_});
  EXPECT_EQ(scheduler_.Stats().tasks_submitted, 9u);
  // A count given back twice under one number counts once.
  int64_t before = scheduler_.SchedulerInfo().reference_count[put_];
  ASSERT_TRUE(scheduler_.DecrementRefCount({put_}, {driver_, 7}).ok());
  EXPECT_EQ(scheduler_.SchedulerInfo().reference_count[put_], before);
  // Under a new number it counts.
  ASSERT_TRUE(scheduler_.DecrementRefCount({put_}, {driver_, 100}).ok());
  EXPECT_EQ(scheduler_.SchedulerInfo().reference_count[put_], before - 1);
  // A refused call is refused again, changing nothing.
  EXPECT_FALSE(scheduler_.IncrementRefCount({9999}, {driver_, 101}).ok());
  EXPECT_FALSE(scheduler_.IncrementRefCount({put_}, {driver_, 101}).ok());
  EXPECT_EQ(scheduler_.SchedulerInfo().reference_count[put_], before - 1);

  rt::TaskScheduler restored(clock_, Options());
  journal_.ReplayInto(restored);
  ASSERT_TRUE(restored.FinishRestore().ok());
  auto after = restored.PutObj(driver_, {driver_, 8});
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, pending_);
  ASSERT_TRUE(restored.DecrementRefCount({put_}, {driver_, 100}).ok());
  EXPECT_EQ(restored.SchedulerInfo().reference_count[put_], before - 1);
  // Only the last kRememberedCalls of a worker are kept.
  for (uint64_t n = 1000; n < 1000 + rt::TaskScheduler::kRememberedCalls; ++n) {
    ASSERT_TRUE(restored.IncrementRefCount({put_}, {driver_, n}).ok());
    ASSERT_TRUE(restored.DecrementRefCount({put_}, {driver_, n + 100000}).ok());
  }
  ASSERT_TRUE(restored.DecrementRefCount({put_}, {driver_, 100}).ok());
  EXPECT_EQ(restored.SchedulerInfo().reference_count[put_], before - 2);
}

TEST_F(SchedulerStateTest, AReportSentAgainDoesNotEndTheWorkersNextTask) {
  rt::StoreId store = *scheduler_.RegisterObjStore("127.0.0.1:7001");
  rt::WorkerId worker = AddWorker(scheduler_, "127.0.0.1:7001", "127.0.0.1:9001");
  rt::WorkerId driver = scheduler_.RegisterWorker("127.0.0.1", "", true, "")->worker;
  ASSERT_TRUE(scheduler_.SubmitTask(driver, {"f", {{0, "a"}}, {}}).ok());
  ASSERT_TRUE(scheduler_.SubmitTask(driver, {"f", {{0, "b"}}, {}}).ok());
  auto runs = Drain<rt::ExecuteTaskEffect>(scheduler_);
  ASSERT_EQ(runs.size(), 1u);
  ASSERT_TRUE(scheduler_.ObjReady(runs[0].task.results[0], store, 1).ok());
  rt::FinishedTask report{true, "", runs[0].operation};
  ASSERT_TRUE(scheduler_.ReadyForNewTask(worker, report).ok());
  auto next = Drain<rt::ExecuteTaskEffect>(scheduler_);
  ASSERT_EQ(next.size(), 1u);
  // The first report again (its answer was lost in a restart): the second task runs on.
  ASSERT_TRUE(scheduler_.ReadyForNewTask(worker, report).ok());
  EXPECT_EQ(scheduler_.TaskInfo().running.size(), 1u);
  EXPECT_EQ(scheduler_.Stats().tasks_succeeded, 1u);
}

TEST(SchedulerRecordsTest, DamagedRecordsAreRefusedWithTheReason) {
  state::v1::SchedulerChanges record;
  record.add_workers()->set_id(3);
  record.mutable_workers(0)->set_state(17);
  auto bad = SchedulerChangesFromProto(record);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("worker 3 has state 17"), std::string::npos);
  record.Clear();
  record.add_operations()->set_id(0);
  EXPECT_FALSE(SchedulerChangesFromProto(record).ok());
  record.Clear();
  auto* wanted = record.add_wanted();
  wanted->set_canonical(4);
  wanted->add_stores(1);
  EXPECT_FALSE(SchedulerChangesFromProto(record).ok());
  record.Clear();
  record.add_exported_functions()->set_index(uint64_t{1} << 40);
  EXPECT_FALSE(SchedulerChangesFromProto(record).ok());
  record.Clear();
  record.add_forgotten_objects(0);
  EXPECT_FALSE(SchedulerChangesFromProto(record).ok());
}

// The history of finished tasks (--task-history, here 0: none kept): what it forgot stays
// forgotten after a restart, from the journal or from a snapshot, and no id is handed out again,
// not even the highest, forgotten ones.
TEST(SchedulerHistoryStateTest, WhatTheHistoryForgotStaysForgottenAfterARestore) {
  ManualClock clock;
  rt::SchedulerOptions options;
  options.limits.task_history = 0;
  RecordingJournal journal;
  rt::TaskScheduler scheduler(clock, options);
  scheduler.SetJournal(&journal);
  rt::StoreId store = *scheduler.RegisterObjStore("127.0.0.1:7001");
  rt::WorkerId driver = scheduler.RegisterWorker("127.0.0.1", "", true, "")->worker;
  rt::WorkerId worker =
      scheduler.RegisterWorker("127.0.0.1", "127.0.0.1:7001", false, "127.0.0.1:9001")->worker;
  ASSERT_TRUE(scheduler.ReadyForNewTask(worker, std::nullopt).ok());
  ASSERT_TRUE(scheduler.RegisterFunction(worker, "f", 1).ok());
  rt::ObjectId kept = 0, forgotten = 0;
  for (rt::ObjectId* result : {&kept, &forgotten}) {
    auto submitted = scheduler.SubmitTask(driver, {"f", {{0, "x"}}, {}});
    ASSERT_TRUE(submitted.ok()) << submitted.status();
    *result = submitted->results[0];
    for (const auto& run : Drain<rt::ExecuteTaskEffect>(scheduler)) {
      ASSERT_TRUE(scheduler.ObjReady(*result, store, 8).ok());
      ASSERT_TRUE(
          scheduler.ReadyForNewTask(worker, rt::FinishedTask{true, "", run.operation}).ok());
    }
  }
  ASSERT_TRUE(scheduler.DecrementRefCount({forgotten}).ok());
  ASSERT_EQ(scheduler.Stats().tasks_kept, 0u);
  ASSERT_EQ(scheduler.Stats().objects_kept, 1u);

  rt::TaskScheduler from_journal(clock, options);
  journal.ReplayInto(from_journal);
  rt::TaskScheduler from_snapshot(clock, options);
  SplitSchedulerState(scheduler.CaptureState(), 64, [&](const state::v1::SchedulerChanges& r) {
    auto changes = SchedulerChangesFromProto(r);
    ASSERT_TRUE(changes.ok()) << changes.status();
    from_snapshot.Restore(*changes);
  });
  for (rt::TaskScheduler* restored : {&from_journal, &from_snapshot}) {
    EXPECT_EQ(Describe(*restored), Describe(scheduler));
    ASSERT_TRUE(restored->FinishRestore().ok());
    EXPECT_EQ(restored->Stats().objects_kept, 1u);
    EXPECT_TRUE(restored->IncrementRefCount({kept}).ok());
    absl::Status again = restored->IncrementRefCount({forgotten});
    EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
    EXPECT_NE(again.message().find("forgotten"), std::string::npos) << again;
    EXPECT_EQ(*restored->PutObj(driver), forgotten + 1);  // operation 3
    (void)restored->TakeEffects();
    ASSERT_TRUE(restored->SubmitTask(driver, {"f", {{0, "y"}}, {}}).ok());
    std::vector<rt::ExecuteTaskEffect> runs = Drain<rt::ExecuteTaskEffect>(*restored);
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].operation, 4u);
    EXPECT_EQ(runs[0].task.results, std::vector<rt::ObjectId>{forgotten + 2});
  }
}

// Through real files: the coordinator's --state-dir holds the scheduler too, across snapshots.
TEST(SchedulerStateStoreTest, TheSchedulerComesBackFromTheStateDirectory) {
  std::string pattern = (fs::temp_directory_path() / "cohort-sched-state-XXXXXX").string();
  ASSERT_NE(mkdtemp(pattern.data()), nullptr);
  const std::string dir = pattern + "/state";
  ServiceConfig config;
  config.jobs.push_back({"worker", 1});
  ManualClock clock;
  StateStoreOptions options;
  options.dir = dir;
  options.sync_interval = absl::ZeroDuration();
  options.compact_bytes = 2048;  // small: snapshots are taken while the test runs
  std::string before;
  {
    rt::TaskScheduler scheduler(clock, Options());
    std::optional<DurableState> restored;
    auto store = StateStore::Open(options, config, &restored, &scheduler);
    ASSERT_TRUE(store.ok()) << store.status();
    auto service = CoordinationService::Create(config, &clock, nullptr, store->get());
    ASSERT_TRUE(service.ok());
    ASSERT_TRUE((*store)->Start(service->get(), &scheduler).ok());
    scheduler.SetJournal(store->get());
    rt::StoreId s = *scheduler.RegisterObjStore("127.0.0.1:7001");
    rt::WorkerId w = scheduler.RegisterWorker("127.0.0.1", "", false, "127.0.0.1:9001")->worker;
    ASSERT_TRUE(scheduler.ReadyForNewTask(w, std::nullopt).ok());
    ASSERT_TRUE(scheduler.RegisterFunction(w, "f", 1).ok());
    rt::WorkerId d = scheduler.RegisterWorker("127.0.0.1", "", true, "")->worker;
    for (int i = 0; i < 200; ++i) {
      auto r = scheduler.SubmitTask(d, {"f", {{0, std::string(50, 'v')}}, {}},
                                    {d, static_cast<uint64_t>(i + 1)});
      ASSERT_TRUE(r.ok());
      for (const auto& run : Drain<rt::ExecuteTaskEffect>(scheduler)) {
        ASSERT_TRUE(scheduler.ObjReady(run.task.results[0], s, 10).ok());
        ASSERT_TRUE(scheduler.ReadyForNewTask(w, rt::FinishedTask{true, "", run.operation}).ok());
      }
    }
    // Compacted meanwhile, on the store's own thread (however late a loaded machine runs it).
    EXPECT_TRUE(testing::Eventually([&] { return (*store)->GetStats().generation >= 2; }))
        << (*store)->GetStats().generation;
    before = Describe(scheduler);
    (*store)->Stop();
  }
  rt::TaskScheduler scheduler(clock, Options());
  std::optional<DurableState> restored;
  auto store = StateStore::Open(options, config, &restored, &scheduler);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE(restored.has_value());
  EXPECT_EQ(Describe(scheduler), before);
  EXPECT_EQ(scheduler.Stats().tasks_succeeded, 200u);
  store->reset();
  fs::remove_all(pattern);
}

}  // namespace
}  // namespace cohort
