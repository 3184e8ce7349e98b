#include "runtime/scheduler/task_scheduler.h"

#include <string>
#include <variant>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::runtime {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class TaskSchedulerTest : public ::testing::Test {
 protected:
  TaskSchedulerTest() : scheduler_(clock_, Options()) {}

  SchedulerOptions Options() {
    SchedulerOptions options;
    options.max_task_retries = 2;
    options.liveness_timeout = absl::Seconds(10);
    options.on_dispatch = [this](absl::Duration d) { latencies_.push_back(d); };
    return options;
  }

  StoreId AddStore(const std::string& address) {
    absl::StatusOr<StoreId> id = scheduler_.RegisterObjStore(address);
    EXPECT_TRUE(id.ok()) << id.status();
    return *id;
  }

  // A worker on the store at `store_address`, ready, with `functions` registered.
  WorkerId AddWorker(const std::string& store_address, const std::string& address,
                     const std::vector<std::pair<std::string, int>>& functions) {
    absl::StatusOr<WorkerRegistration> r =
        scheduler_.RegisterWorker("127.0.0.1", store_address, false, address);
    EXPECT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(scheduler_.ReadyForNewTask(r->worker, std::nullopt).ok());
    for (const auto& [name, returns] : functions) {
      EXPECT_TRUE(scheduler_.RegisterFunction(r->worker, name, returns).ok());
    }
    return r->worker;
  }

  WorkerId AddDriver(const std::string& store_address) {
    absl::StatusOr<WorkerRegistration> r =
        scheduler_.RegisterWorker("127.0.0.1", store_address, true, "");
    EXPECT_TRUE(r.ok()) << r.status();
    return r->worker;
  }

  std::vector<ObjectId> Submit(WorkerId driver, const std::string& fn,
                               const std::vector<TaskArg>& args) {
    absl::StatusOr<SubmitResult> r = scheduler_.SubmitTask(driver, TaskSpec{fn, args, {}});
    EXPECT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->function_registered);
    return r->results;
  }

  template <typename T>
  std::vector<T> Drain() {
    std::vector<T> out;
    for (Effect& e : scheduler_.TakeEffects()) {
      if (auto* t = std::get_if<T>(&e)) out.push_back(std::move(*t));
    }
    return out;
  }

  // The worker ran its task: results stored at its store, then it asks for more.
  void Complete(const ExecuteTaskEffect& run, StoreId store) {
    for (ObjectId result : run.task.results) {
      ASSERT_TRUE(scheduler_.ObjReady(result, store, 8).ok());
    }
    ASSERT_TRUE(scheduler_.ReadyForNewTask(run.worker, FinishedTask{true, ""}).ok());
  }

  ManualClock clock_;
  std::vector<absl::Duration> latencies_;
  TaskScheduler scheduler_;
};

TaskArg Value(const std::string& bytes) { return TaskArg{0, bytes}; }
TaskArg Ref(ObjectId id) { return TaskArg{id, ""}; }

TEST_F(TaskSchedulerTest, StoresGetSequentialIdsAndWorkersTheStoreTheyName) {
  EXPECT_EQ(AddStore("127.0.0.1:7001"), 1u);
  EXPECT_EQ(AddStore("127.0.0.2:7001"), 2u);
  absl::StatusOr<WorkerRegistration> by_address =
      scheduler_.RegisterWorker("127.0.0.9", "127.0.0.2:7001", false, "127.0.0.2:9001");
  ASSERT_TRUE(by_address.ok());
  EXPECT_EQ(by_address->store, 2u);
  EXPECT_EQ(by_address->worker_address, "127.0.0.2:9001");
  // No store named: the store on the worker's node, and an address given on that node.
  absl::StatusOr<WorkerRegistration> by_node =
      scheduler_.RegisterWorker("127.0.0.1", "", false, "");
  ASSERT_TRUE(by_node.ok());
  EXPECT_EQ(by_node->store, 1u);
  EXPECT_EQ(by_node->store_address, "127.0.0.1:7001");
  EXPECT_EQ(by_node->worker_address, "127.0.0.1:40000");
}

TEST_F(TaskSchedulerTest, RegistrationsWithBadAddressesAreRefused) {
  EXPECT_EQ(scheduler_.RegisterObjStore("nohostport").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scheduler_.RegisterObjStore("").status().code(), absl::StatusCode::kInvalidArgument);
  AddStore("127.0.0.1:7001");
  absl::StatusOr<WorkerRegistration> unknown =
      scheduler_.RegisterWorker("127.0.0.1", "127.0.0.1:7999", false, "127.0.0.1:9000");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("127.0.0.1:7999"));
  EXPECT_EQ(scheduler_.RegisterWorker("127.0.0.1", "127.0.0.1:7001", false, "9000").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TaskSchedulerTest, ATaskOfAnUnknownFunctionIsNotRegisteredAndChangesNothing) {
  AddStore("127.0.0.1:7001");
  WorkerId driver = AddDriver("127.0.0.1:7001");
  absl::StatusOr<SubmitResult> r = scheduler_.SubmitTask(driver, TaskSpec{"nope", {}, {}});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->function_registered);
  EXPECT_THAT(r->results, IsEmpty());
  SchedulerInfoView info = scheduler_.SchedulerInfo();
  EXPECT_THAT(info.operations, IsEmpty());
  EXPECT_THAT(info.target_objectid, ElementsAre(0)) << "no object: only the placeholder";
}

TEST_F(TaskSchedulerTest, BadSubmissionsAreRefused) {
  AddStore("127.0.0.1:7001");
  WorkerId driver = AddDriver("127.0.0.1:7001");
  AddWorker("127.0.0.1:7001", "127.0.0.1:9001", {{"f", 1}});
  EXPECT_EQ(scheduler_.SubmitTask(driver, TaskSpec{"f", {TaskArg{}}, {}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scheduler_.SubmitTask(driver, TaskSpec{"f", {Ref(77)}, {}}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(scheduler_.SubmitTask(driver, TaskSpec{"f", {}, {5}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scheduler_.SubmitTask(99, TaskSpec{"f", {}, {}}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(scheduler_.SchedulerInfo().operations, IsEmpty());
}

TEST_F(TaskSchedulerTest, ATaskRunsOnAWorkerWithItsFunctionAndSucceeds) {
  StoreId store = AddStore("127.0.0.1:7001");
  WorkerId driver = AddDriver("127.0.0.1:7001");
  WorkerId worker = AddWorker("127.0.0.1:7001", "127.0.0.1:9001", {{"add", 1}});
  std::vector<ObjectId> results = Submit(driver, "add", {Value("a"), Value("b")});
  ASSERT_EQ(results.size(), 1u);
  std::vector<ExecuteTaskEffect> runs = Drain<ExecuteTaskEffect>();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].worker, worker);
  EXPECT_EQ(runs[0].worker_address, "127.0.0.1:9001");
  EXPECT_EQ(runs[0].task.function_name, "add");
  EXPECT_EQ(runs[0].task.results, results);
  EXPECT_EQ(scheduler_.TaskInfo().running.size(), 1u);
  Complete(runs[0], store);
  TaskInfoView info = scheduler_.TaskInfo();
  EXPECT_EQ(info.succeeded, 1u);
  EXPECT_THAT(info.running, IsEmpty());
  EXPECT_THAT(scheduler_.SchedulerInfo().idle_workers, ElementsAre(worker));
}

TEST_F(TaskSchedulerTest, ATaskWaitsForItsArgumentsAndGetsThemDeliveredToItsStore) {
  StoreId near = AddStore("127.0.0.1:7001");
  StoreId far = AddStore("127.0.0.2:7001");
  WorkerId driver = AddDriver("127.0.0.1:7001");
  AddWorker("127.0.0.1:7001", "127.0.0.1:9001", {{"f", 1}});
  absl::StatusOr<ObjectId> put = scheduler_.PutObj(driver);
  ASSERT_TRUE(put.ok());
  std::vector<ObjectId> results = Submit(driver, "f", {Ref(*put)});
  EXPECT_THAT(Drain<ExecuteTaskEffect>(), IsEmpty()) << "its argument is not ready anywhere";
  ASSERT_TRUE(scheduler_.ObjReady(*put, far, 100).ok());
  std::vector<Effect> effects = scheduler_.TakeEffects();
  ASSERT_EQ(effects.size(), 1u);
  const auto* delivery = std::get_if<DeliverEffect>(&effects[0]);
  ASSERT_NE(delivery, nullptr);
  EXPECT_EQ(delivery->to, near);
  EXPECT_EQ(delivery->from_address, "127.0.0.2:7001");
  EXPECT_EQ(delivery->object, *put);
  ASSERT_TRUE(scheduler_.ObjReady(*put, near, 100).ok());
  std::vector<ExecuteTaskEffect> runs = Drain<ExecuteTaskEffect>();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].task.args[0].id, *put);
  EXPECT_EQ(scheduler_.Stats().deliveries, 1u);
  EXPECT_EQ(scheduler_.Stats().delivered_bytes, 100u);
}

TEST_F(TaskSchedulerTest, TheWorkerWhoseStoreHoldsTheArgumentsIsPicked) {
  AddStore("127.0.0.1:7001");
  StoreId second = AddStore("127.0.0.2:7001");
  WorkerId driver = AddDriver("127.0.0.1:7001");
  AddWorker("127.0.0.1:7001", "127.0.0.1:9001", {{"f", 1}});
  WorkerId local = AddWorker("127.0.0.2:7001", "127.0.0.2:9001", {{"f", 1}});
  ObjectId put = *scheduler_.PutObj(driver);
  ASSERT_TRUE(scheduler_.ObjReady(put, second, 10).ok());
  Submit(driver, "f", {Ref(put)});
  std::vector<Effect> effects = scheduler_.TakeEffects();
  ASSERT_EQ(effects.size(), 1u) << "no delivery: the argument is already there";
  const auto* run = std::get_if<ExecuteTaskEffect>(&effects[0]);
  ASSERT_NE(run, nullptr);
  EXPECT_EQ(run->worker, local);
}

TEST_F(TaskSchedulerTest, AResultAliasedToAnotherObjectReadsAsIt) {
  StoreId store = AddStore("127.0.0.1:7001");
  StoreId other = AddStore("127.0.0.2:7001");
  WorkerId driver = AddDriver("127.0.0.1:7001");
  WorkerId worker = AddWorker("127.0.0.2:7001", "127.0.0.2:9001", {{"wrap", 1}});
  ObjectId put = *scheduler_.PutObj(driver);
  ASSERT_TRUE(scheduler_.ObjReady(put, other, 10).ok());
  ObjectId result = Submit(driver, "wrap", {})[0];
  std::vector<ExecuteTaskEffect> runs = Drain<ExecuteTaskEffect>();
  ASSERT_EQ(runs.size(), 1u);
  // The driver asks for the result before it exists.
  ASSERT_TRUE(scheduler_.RequestObj(driver, result).ok());
  EXPECT_THAT(scheduler_.TakeEffects(), IsEmpty());
  // The task returns the put's id: its result becomes an alias, delivered to the driver's
  // store and announced there.
  ASSERT_TRUE(scheduler_.AliasObjectIDs(result, put).ok());
  ASSERT_TRUE(scheduler_.ReadyForNewTask(worker, FinishedTask{true, ""}).ok());
  std::vector<DeliverEffect> deliveries = Drain<DeliverEffect>();
  ASSERT_EQ(deliveries.size(), 1u);
  EXPECT_EQ(deliveries[0].object, put);
  EXPECT_EQ(deliveries[0].to, store);
  ASSERT_TRUE(scheduler_.ObjReady(put, store, 10).ok());
  std::vector<NotifyAliasEffect> notes = Drain<NotifyAliasEffect>();
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].alias, result);
  EXPECT_EQ(notes[0].canonical, put);
  EXPECT_EQ(scheduler_.TaskInfo().succeeded, 1u);
  EXPECT_THAT(scheduler_.TaskInfo().failed, IsEmpty());
}

TEST_F(TaskSchedulerTest, DroppedHandlesDeallocateOnEveryStoreAndCountsGoToZero) {
  StoreId a = AddStore("127.0.0.1:7001");
  StoreId b = AddStore("127.0.0.2:7001");
  WorkerId driver = AddDriver("127.0.0.1:7001");
  ObjectId inner = *scheduler_.PutObj(driver);
  ObjectId outer = *scheduler_.PutObj(driver);
  ASSERT_TRUE(scheduler_.ObjReady(inner, a, 1).ok());
  ASSERT_TRUE(scheduler_.ObjReady(inner, b, 1).ok());
  ASSERT_TRUE(scheduler_.ObjReady(outer, a, 1).ok());
  ASSERT_TRUE(scheduler_.AddContainedObjectIDs(outer, {inner}).ok());
  ASSERT_TRUE(scheduler_.DecrementRefCount({inner}).ok());
  EXPECT_THAT(Drain<DeallocateEffect>(), IsEmpty()) << "outer still contains inner";
  EXPECT_EQ(scheduler_.DecrementRefCount({outer, outer}).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(scheduler_.DecrementRefCount({outer}).ok());
  std::vector<DeallocateEffect> freed = Drain<DeallocateEffect>();
  ASSERT_EQ(freed.size(), 3u);
  EXPECT_EQ(freed[0].canonical, outer);
  EXPECT_EQ(freed[1].canonical, inner);
  EXPECT_EQ(freed[2].canonical, inner);
  EXPECT_THAT(scheduler_.SchedulerInfo().reference_count, Each(0));
  EXPECT_THAT(scheduler_.SchedulerInfo().target_objectid, ElementsAre(0, inner, outer));
  for (const SchedulerStats::Store& s : scheduler_.Stats().stores) {
    EXPECT_EQ(s.objects, 0u);
    EXPECT_EQ(s.bytes, 0u);
  }
  EXPECT_EQ(scheduler_.RequestObj(driver, outer).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(TaskSchedulerTest, AnArgumentIsHeldUntilItsTaskFinishes) {
  StoreId store = AddStore("127.0.0.1:7001");
  WorkerId driver = AddDriver("127.0.0.1:7001");
  AddWorker("127.0.0.1:7001", "127.0.0.1:9001", {{"f", 1}});
  ObjectId put = *scheduler_.PutObj(driver);
  ASSERT_TRUE(scheduler_.ObjReady(put, store, 1).ok());
  Submit(driver, "f", {Ref(put)});
  ASSERT_TRUE(scheduler_.DecrementRefCount({put}).ok());
  std::vector<Effect> effects = scheduler_.TakeEffects();
  ASSERT_EQ(effects.size(), 1u);
  ExecuteTaskEffect run = std::get<ExecuteTaskEffect>(effects[0]);
  EXPECT_THAT(Drain<DeallocateEffect>(), IsEmpty());
  Complete(run, store);
  std::vector<DeallocateEffect> freed = Drain<DeallocateEffect>();
  ASSERT_EQ(freed.size(), 1u);
  EXPECT_EQ(freed[0].canonical, put);
}

TEST_F(TaskSchedulerTest, ATaskThatRaisesFailsItsResultsAndTheTasksThatNeedThem) {
  StoreId store = AddStore("127.0.0.1:7001");
  WorkerId driver = AddDriver("127.0.0.1:7001");
  WorkerId worker = AddWorker("127.0.0.1:7001", "127.0.0.1:9001", {{"boom", 1}, {"f", 1}});
  ObjectId bad = Submit(driver, "boom", {})[0];
  ObjectId downstream = Submit(driver, "f", {Ref(bad)})[0];
  ASSERT_EQ(Drain<ExecuteTaskEffect>().size(), 1u);
  ASSERT_TRUE(scheduler_.ReadyForNewTask(worker, FinishedTask{false, "ValueError: no good"}).ok());
  TaskInfoView info = scheduler_.TaskInfo();
  ASSERT_EQ(info.failed.size(), 2u);
  EXPECT_EQ(info.failed[0].function_name, "boom");
  EXPECT_EQ(info.failed[0].error_message, "ValueError: no good");
  EXPECT_EQ(info.failed[0].worker_address, "127.0.0.1:9001");
  EXPECT_THAT(info.failed[1].error_message, HasSubstr("argument 0"));
  EXPECT_THAT(info.failed[1].error_message, HasSubstr("ValueError: no good"));
  EXPECT_THAT(Drain<ExecuteTaskEffect>(), IsEmpty());
  // Reading the result: the driver's store is given the error to hold.
  ASSERT_TRUE(scheduler_.RequestObj(driver, downstream).ok());
  std::vector<PlaceErrorEffect> errors = Drain<PlaceErrorEffect>();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].store, store);
  EXPECT_EQ(errors[0].object, downstream);
  EXPECT_EQ(errors[0].function_name, "f");
  EXPECT_THAT(errors[0].message, HasSubstr("ValueError: no good"));
}

TEST_F(TaskSchedulerTest, ALostWorkersTaskRunsAgainElsewhere) {
  StoreId store = AddStore("127.0.0.1:7001");
  WorkerId driver = AddDriver("127.0.0.1:7001");
  WorkerId first = AddWorker("127.0.0.1:7001", "127.0.0.1:9001", {{"f", 1}});
  std::vector<ObjectId> results = Submit(driver, "f", {});
  ASSERT_EQ(Drain<ExecuteTaskEffect>()[0].worker, first);
  WorkerId second = AddWorker("127.0.0.1:7001", "127.0.0.1:9002", {{"f", 1}});
  scheduler_.WorkerLost(first, "connection refused");
  std::vector<ExecuteTaskEffect> runs = Drain<ExecuteTaskEffect>();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].worker, second);
  EXPECT_EQ(runs[0].task.results, results);
  EXPECT_EQ(scheduler_.Stats().tasks_retried, 1u);
  EXPECT_EQ(scheduler_.ReadyForNewTask(first, FinishedTask{true, ""}).code(),
            absl::StatusCode::kFailedPrecondition)
      << "a lost worker is told so";
  Complete(runs[0], store);
  EXPECT_EQ(scheduler_.TaskInfo().succeeded, 1u);
}

TEST_F(TaskSchedulerTest, ATaskFailsWithTheReasonOnceItsRetriesAreSpent) {
  AddStore("127.0.0.1:7001");
  WorkerId driver = AddDriver("127.0.0.1:7001");
  WorkerId w = AddWorker("127.0.0.1:7001", "127.0.0.1:9000", {{"f", 1}});
  Submit(driver, "f", {});
  // max_task_retries = 2: three workers lost under it.
  for (int i = 1; i <= 3; ++i) {
    ASSERT_EQ(Drain<ExecuteTaskEffect>().size(), 1u);
    scheduler_.WorkerLost(w, "process exited");
    if (i < 3) w = AddWorker("127.0.0.1:7001", "127.0.0.1:" + std::to_string(9000 + i), {{"f", 1}});
  }
  TaskInfoView info = scheduler_.TaskInfo();
  ASSERT_EQ(info.failed.size(), 1u);
  EXPECT_THAT(info.failed[0].error_message, HasSubstr("lost 3 times"));
  EXPECT_THAT(info.failed[0].error_message, HasSubstr("process exited"));
}

TEST_F(TaskSchedulerTest, AResultOnALostStoreIsComputedAgain) {
  StoreId a = AddStore("127.0.0.1:7001");
  StoreId b = AddStore("127.0.0.2:7001");
  WorkerId driver = AddDriver("127.0.0.1:7001");
  WorkerId wa = AddWorker("127.0.0.1:7001", "127.0.0.1:9001", {{"f", 1}});
  ObjectId result = Submit(driver, "f", {Value("x")})[0];
  std::vector<ExecuteTaskEffect> runs = Drain<ExecuteTaskEffect>();
  ASSERT_EQ(runs[0].worker, wa);
  AddWorker("127.0.0.2:7001", "127.0.0.2:9001", {{"f", 1}});
  Complete(runs[0], a);
  ASSERT_TRUE(scheduler_.RequestObj(driver, result).ok());
  scheduler_.StoreLost(a, "connection refused");
  // Store a and its worker are gone; the task runs again on store b's worker.
  runs = Drain<ExecuteTaskEffect>();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].worker_address, "127.0.0.2:9001");
  EXPECT_EQ(runs[0].task.results, std::vector<ObjectId>{result});
  EXPECT_EQ(scheduler_.Stats().tasks_rebuilt, 1u);
  ASSERT_TRUE(scheduler_.ObjReady(result, b, 8).ok());
  EXPECT_EQ(scheduler_.TaskInfo().succeeded, 1u) << "the rebuild is still running";
}

TEST_F(TaskSchedulerTest, APutWhoseOnlyCopyIsLostReadsAsALostObject) {
  AddStore("127.0.0.1:7001");
  StoreId b = AddStore("127.0.0.2:7001");
  WorkerId driver = AddDriver("127.0.0.1:7001");
  AddWorker("127.0.0.1:7001", "127.0.0.1:9001", {{"f", 1}});
  ObjectId put = *scheduler_.PutObj(driver);
  ASSERT_TRUE(scheduler_.ObjReady(put, b, 8).ok());
  scheduler_.StoreLost(b, "not heard from for 10s");
  ObjectId result = Submit(driver, "f", {Ref(put)})[0];
  TaskInfoView info = scheduler_.TaskInfo();
  ASSERT_EQ(info.failed.size(), 1u);
  EXPECT_THAT(info.failed[0].error_message, HasSubstr("is lost"));
  EXPECT_THAT(info.failed[0].error_message, HasSubstr("127.0.0.2:7001"));
  ASSERT_TRUE(scheduler_.RequestObj(driver, result).ok());
  ASSERT_EQ(Drain<PlaceErrorEffect>().size(), 1u);
  EXPECT_EQ(scheduler_.Stats().objects_lost, 1u);
}

TEST_F(TaskSchedulerTest, KillWorkersSucceedsOnlyWhenNothingIsQueuedOrRunning) {
  StoreId store = AddStore("127.0.0.1:7001");
  WorkerId driver = AddDriver("127.0.0.1:7001");
  WorkerId worker = AddWorker("127.0.0.1:7001", "127.0.0.1:9001", {{"f", 1}});
  Submit(driver, "f", {});
  std::vector<ExecuteTaskEffect> runs = Drain<ExecuteTaskEffect>();
  EXPECT_FALSE(scheduler_.KillWorkers());
  EXPECT_THAT(scheduler_.TakeEffects(), IsEmpty());
  Complete(runs[0], store);
  EXPECT_TRUE(scheduler_.KillWorkers());
  std::vector<DieEffect> deaths = Drain<DieEffect>();
  ASSERT_EQ(deaths.size(), 1u);
  EXPECT_EQ(deaths[0].worker, worker);
  EXPECT_TRUE(scheduler_.SchedulerInfo().functions.empty());
  absl::StatusOr<SubmitResult> after = scheduler_.SubmitTask(driver, TaskSpec{"f", {}, {}});
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->function_registered);
}

TEST_F(TaskSchedulerTest, ExportedFunctionsReachEveryWorkerAndLaterOnesOnTheirFirstAsk) {
  AddStore("127.0.0.1:7001");
  WorkerId early = AddWorker("127.0.0.1:7001", "127.0.0.1:9001", {});
  ASSERT_TRUE(scheduler_.ExportFunction("pickled f").ok());
  ASSERT_TRUE(scheduler_.ExportReusableVariable("var").ok());
  std::vector<Effect> effects = scheduler_.TakeEffects();
  ASSERT_EQ(effects.size(), 2u);
  EXPECT_EQ(std::get<ImportFunctionEffect>(effects[0]).worker, early);
  EXPECT_EQ(std::get<ImportReusableVariableEffect>(effects[1]).reusable_variable, "var");
  absl::StatusOr<WorkerRegistration> late =
      scheduler_.RegisterWorker("127.0.0.1", "127.0.0.1:7001", false, "127.0.0.1:9002");
  ASSERT_TRUE(late.ok());
  EXPECT_THAT(scheduler_.TakeEffects(), IsEmpty()) << "not before it asks for work";
  ASSERT_TRUE(scheduler_.ReadyForNewTask(late->worker, std::nullopt).ok());
  std::vector<ImportFunctionEffect> imports = Drain<ImportFunctionEffect>();
  ASSERT_EQ(imports.size(), 1u);
  EXPECT_EQ(imports[0].worker, late->worker);
  EXPECT_EQ(imports[0].implementation, "pickled f");
  EXPECT_EQ(scheduler_.ExportFunction("").code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(TaskSchedulerTest, FunctionsRegisteredWithOtherReturnCountsOrByDriversAreRefused) {
  AddStore("127.0.0.1:7001");
  WorkerId driver = AddDriver("127.0.0.1:7001");
  WorkerId worker = AddWorker("127.0.0.1:7001", "127.0.0.1:9001", {{"f", 2}});
  EXPECT_EQ(scheduler_.RegisterFunction(worker, "f", 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scheduler_.RegisterFunction(driver, "g", 1).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(scheduler_.ReadyForNewTask(driver, std::nullopt).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(scheduler_.SchedulerInfo().functions.at("f").second, 2u);
}

TEST_F(TaskSchedulerTest, SilentWorkersAndStoresAreLostAfterTheLivenessTimeout) {
  AddStore("127.0.0.1:7001");
  StoreId quiet = AddStore("127.0.0.2:7001");
  WorkerId driver = AddDriver("127.0.0.1:7001");
  WorkerId worker = AddWorker("127.0.0.1:7001", "127.0.0.1:9001", {{"f", 1}});
  clock_.Advance(absl::Seconds(6));
  scheduler_.StoreSeen(1);
  scheduler_.WorkerSeen(worker);
  clock_.Advance(absl::Seconds(6));
  scheduler_.CheckLiveness();
  SchedulerStats stats = scheduler_.Stats();
  EXPECT_EQ(stats.stores_lost, 1u);
  EXPECT_FALSE(stats.stores[quiet - 1].alive);
  EXPECT_EQ(stats.workers_lost, 0u);
  EXPECT_EQ(stats.workers_alive, 1u);
  EXPECT_TRUE(scheduler_.PutObj(driver).ok()) << "drivers are not timed out";
  clock_.Advance(absl::Seconds(11));
  scheduler_.StoreSeen(1);
  scheduler_.CheckLiveness();
  EXPECT_EQ(scheduler_.Stats().workers_lost, 1u);
  EXPECT_EQ(scheduler_.ReadyForNewTask(worker, std::nullopt).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(TaskSchedulerTest, SchedulingLatencyIsTheTimeFromQueueToDispatch) {
  StoreId store = AddStore("127.0.0.1:7001");
  WorkerId driver = AddDriver("127.0.0.1:7001");
  AddWorker("127.0.0.1:7001", "127.0.0.1:9001", {{"f", 1}});
  Submit(driver, "f", {});
  Submit(driver, "f", {});
  std::vector<ExecuteTaskEffect> runs = Drain<ExecuteTaskEffect>();
  ASSERT_EQ(runs.size(), 1u) << "one worker, one task at a time";
  clock_.Advance(absl::Milliseconds(250));
  Complete(runs[0], store);
  EXPECT_THAT(latencies_, ElementsAre(absl::ZeroDuration(), absl::Milliseconds(250)));
  EXPECT_EQ(Drain<ExecuteTaskEffect>().size(), 1u);
}

TEST_F(TaskSchedulerTest, AStoreRegisteringAgainAtItsAddressStartsEmpty) {
  StoreId old_id = AddStore("127.0.0.1:7001");
  WorkerId driver = AddDriver("127.0.0.1:7001");
  ObjectId put = *scheduler_.PutObj(driver);
  ASSERT_TRUE(scheduler_.ObjReady(put, old_id, 8).ok());
  StoreId new_id = AddStore("127.0.0.1:7001");
  EXPECT_NE(new_id, old_id);
  EXPECT_EQ(scheduler_.ObjReady(put, old_id, 8).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(scheduler_.Stats().objects_lost, 1u);
  EXPECT_EQ(scheduler_.PutObj(driver).status().code(), absl::StatusCode::kFailedPrecondition)
      << "the driver went with its store";
}

TEST_F(TaskSchedulerTest, AWorkerThatLeavesGetsNoNewTaskAndItsUnstartedTaskRunsElsewhere) {
  StoreId a = AddStore("127.0.0.2:7000");
  WorkerId one = AddWorker("127.0.0.2:7000", "127.0.0.2:9001", {{"f", 1}});
  WorkerId two = AddWorker("127.0.0.2:7000", "127.0.0.2:9002", {{"f", 1}});
  WorkerId driver = AddDriver("127.0.0.2:7000");
  Submit(driver, "f", {{0, "a"}});
  Submit(driver, "f", {{0, "b"}});
  std::vector<ExecuteTaskEffect> runs = Drain<ExecuteTaskEffect>();
  ASSERT_EQ(runs.size(), 2u);
  const ExecuteTaskEffect& on_one = runs[0].worker == one ? runs[0] : runs[1];
  const ExecuteTaskEffect& on_two = runs[0].worker == one ? runs[1] : runs[0];
  // One finishes its task and leaves with the report: the task counts, the worker is gone.
  ASSERT_TRUE(scheduler_.ObjReady(on_one.task.results[0], a, 8).ok());
  ASSERT_TRUE(scheduler_.ReadyForNewTask(one, FinishedTask{true, "", on_one.operation}, true).ok());
  EXPECT_EQ(scheduler_.Stats().tasks_succeeded, 1u);
  EXPECT_EQ(scheduler_.Stats().workers_alive, 1u);
  EXPECT_THAT(scheduler_.SchedulerInfo().functions.at("f").first, ElementsAre(two));
  // A new task waits for two, not for the worker that left.
  Submit(driver, "f", {{0, "c"}});
  EXPECT_THAT(Drain<ExecuteTaskEffect>(), IsEmpty());
  // Two leaves without running what it was given: that task runs elsewhere, not a retry.
  ASSERT_TRUE(scheduler_.ReadyForNewTask(two, std::nullopt, true).ok());
  EXPECT_EQ(scheduler_.Stats().tasks_retried, 0u);
  EXPECT_EQ(scheduler_.Stats().tasks_queued, 2u);
  EXPECT_EQ(scheduler_.Stats().workers_alive, 0u);
  // It went to the back of the queue: a new worker runs "c", then it.
  WorkerId three = AddWorker("127.0.0.2:7000", "127.0.0.2:9003", {{"f", 1}});
  std::vector<ExecuteTaskEffect> next = Drain<ExecuteTaskEffect>();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].worker, three);
  Complete(next[0], a);
  std::vector<ExecuteTaskEffect> again = Drain<ExecuteTaskEffect>();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].operation, on_two.operation);
  // A call from a worker that left is refused, naming it.
  absl::Status late = scheduler_.ReadyForNewTask(one, std::nullopt);
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition);
}

// The history of finished tasks (SchedulerLimits::task_history): a scheduler with a short one.
class TaskHistoryTest : public ::testing::Test {
 protected:
  explicit TaskHistoryTest(size_t history = 2) : scheduler_(clock_, Options(history)) {
    store_a_ = *scheduler_.RegisterObjStore("127.0.0.1:7001");
    store_b_ = *scheduler_.RegisterObjStore("127.0.0.2:7001");
    driver_ = scheduler_.RegisterWorker("127.0.0.2", "127.0.0.2:7001", true, "")->worker;
    worker_ =
        scheduler_.RegisterWorker("127.0.0.1", "127.0.0.1:7001", false, "127.0.0.1:9001")->worker;
    EXPECT_TRUE(scheduler_.ReadyForNewTask(worker_, std::nullopt).ok());
    EXPECT_TRUE(scheduler_.RegisterFunction(worker_, "f", 1).ok());
    EXPECT_TRUE(scheduler_.RegisterFunction(worker_, "none", 0).ok());
  }

  static SchedulerOptions Options(size_t history) {
    SchedulerOptions options;
    options.limits.task_history = history;
    options.limits.max_tasks = 4;
    return options;
  }

  // Submits `fn` with `args`, runs it on the worker (results at store a); returns its results.
  std::vector<ObjectId> Run(const std::string& fn, const std::vector<TaskArg>& args = {}) {
    absl::StatusOr<SubmitResult> submitted = scheduler_.SubmitTask(driver_, TaskSpec{fn, args, {}});
    EXPECT_TRUE(submitted.ok()) << submitted.status();
    if (!submitted.ok()) return {};
    for (const Effect& e : scheduler_.TakeEffects()) {
      const auto* run = std::get_if<ExecuteTaskEffect>(&e);
      if (run == nullptr) continue;
      for (ObjectId r : run->task.results) EXPECT_TRUE(scheduler_.ObjReady(r, store_a_, 8).ok());
      EXPECT_TRUE(scheduler_.ReadyForNewTask(worker_, FinishedTask{true, "", run->operation}).ok());
    }
    return submitted->results;
  }

  // The error a store that asks for `object` is given to hold ("" if none).
  std::string ErrorOf(ObjectId object) {
    (void)scheduler_.TakeEffects();
    EXPECT_TRUE(scheduler_.RequestObj(driver_, object).ok());
    for (const Effect& e : scheduler_.TakeEffects()) {
      if (const auto* placed = std::get_if<PlaceErrorEffect>(&e)) return placed->message;
    }
    return "";
  }

  ManualClock clock_;
  TaskScheduler scheduler_;
  StoreId store_a_ = 0, store_b_ = 0;
  WorkerId driver_ = 0, worker_ = 0;
};

TEST_F(TaskHistoryTest, OnlyTheNewestFinishedTasksAreKeptSoManyMoreThanMaxTasksRun) {
  std::vector<ObjectId> results;
  for (int i = 0; i < 20; ++i) {
    results.push_back(Run("f", {Value("x")})[0]);
    ASSERT_TRUE(scheduler_.DecrementRefCount({results.back()}).ok());
  }
  // max_tasks is 4: without a history the fifth task would have been refused.
  SchedulerStats stats = scheduler_.Stats();
  EXPECT_EQ(stats.tasks_succeeded, 20u);
  EXPECT_EQ(stats.tasks_history, 2u);
  EXPECT_EQ(stats.tasks_kept, 2u);
  EXPECT_EQ(stats.objects_kept, 2u) << "the results let go of the two tasks kept";
  SchedulerInfoView info = scheduler_.SchedulerInfo();
  ASSERT_EQ(info.operations.size(), 2u);
  EXPECT_EQ(info.operations[1].task.results[0], results.back());
  EXPECT_EQ(info.reference_count.size(), results.back() + 1) << "every id, forgotten ones too";
  // A forgotten id reads as let go, not as unknown, and is never handed out again.
  absl::Status forgotten = scheduler_.IncrementRefCount({results[0]});
  EXPECT_EQ(forgotten.code(), absl::StatusCode::kFailedPrecondition) << forgotten;
  EXPECT_THAT(std::string(forgotten.message()), HasSubstr("forgotten"));
  EXPECT_EQ(scheduler_.RequestObj(driver_, results[0]).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(scheduler_.IncrementRefCount({results.back() + 1}).code(), absl::StatusCode::kNotFound);
  EXPECT_GT(Run("f")[0], results.back());
}

TEST_F(TaskHistoryTest, AResultLetGoAfterItsTaskWasForgottenIsForgottenThen) {
  ObjectId kept = Run("f")[0];
  ObjectId put = *scheduler_.PutObj(driver_);
  ASSERT_TRUE(scheduler_.ObjReady(put, store_b_, 8).ok());
  Run("none");
  Run("none");  // the task of `kept` and the put leave the history
  EXPECT_EQ(scheduler_.Stats().tasks_kept, 2u);
  EXPECT_EQ(scheduler_.Stats().objects_kept, 2u) << "both still held";
  EXPECT_TRUE(scheduler_.IncrementRefCount({kept, put}).ok());
  ASSERT_TRUE(scheduler_.DecrementRefCount({kept, put, kept}).ok());
  EXPECT_EQ(scheduler_.Stats().objects_kept, 1u) << "the put is still held once";
  ASSERT_TRUE(scheduler_.DecrementRefCount({put}).ok());
  EXPECT_EQ(scheduler_.Stats().objects_kept, 0u);
  EXPECT_EQ(scheduler_.IncrementRefCount({put}).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(TaskHistoryTest, ALostObjectWhoseTaskWasForgottenFailsNamingTheFlag) {
  ObjectId old_result = Run("f")[0];
  Run("none");
  ObjectId new_result = Run("f")[0];  // the task of old_result leaves the history
  // A worker on store b, for the rebuild; then store a, with the only copies, is lost.
  WorkerId other =
      scheduler_.RegisterWorker("127.0.0.2", "127.0.0.2:7001", false, "127.0.0.2:9001")->worker;
  ASSERT_TRUE(scheduler_.ReadyForNewTask(other, std::nullopt).ok());
  ASSERT_TRUE(scheduler_.RegisterFunction(other, "f", 1).ok());
  (void)scheduler_.TakeEffects();
  scheduler_.StoreLost(store_a_, "connection refused");
  std::vector<ExecuteTaskEffect> rebuilds;
  for (Effect& e : scheduler_.TakeEffects()) {
    if (auto* run = std::get_if<ExecuteTaskEffect>(&e)) rebuilds.push_back(*run);
  }
  ASSERT_EQ(rebuilds.size(), 1u) << "the task still in the history runs again";
  EXPECT_EQ(rebuilds[0].task.results, std::vector<ObjectId>{new_result});
  EXPECT_EQ(scheduler_.Stats().objects_lost, 1u);
  std::string error = ErrorOf(old_result);
  EXPECT_THAT(error, HasSubstr("no longer kept"));
  EXPECT_THAT(error, HasSubstr("--task-history"));
  EXPECT_THAT(error, HasSubstr("connection refused"));
}

TEST_F(TaskHistoryTest, ALostObjectWhoseTasksArgumentWasForgottenFailsNamingTheFlag) {
  ObjectId input = Run("f")[0];
  absl::StatusOr<SubmitResult> second =
      scheduler_.SubmitTask(driver_, TaskSpec{"f", {Ref(input)}, {}});
  ASSERT_TRUE(second.ok()) << second.status();
  ObjectId output = second->results[0];
  ASSERT_TRUE(scheduler_.DecrementRefCount({input}).ok()) << "the queued task still holds it";
  for (const Effect& e : scheduler_.TakeEffects()) {
    if (const auto* run = std::get_if<ExecuteTaskEffect>(&e)) {
      ASSERT_TRUE(scheduler_.ObjReady(output, store_a_, 8).ok());
      ASSERT_TRUE(scheduler_.ReadyForNewTask(worker_, FinishedTask{true, "", run->operation}).ok());
    }
  }
  Run("none");  // the first task leaves the history, and `input`, let go, with it
  EXPECT_EQ(scheduler_.IncrementRefCount({input}).code(), absl::StatusCode::kFailedPrecondition);
  scheduler_.StoreLost(store_a_, "node drained");
  std::string error = ErrorOf(output);
  EXPECT_THAT(error, HasSubstr("cannot run again"));
  EXPECT_THAT(error, HasSubstr("object " + std::to_string(input)));
  EXPECT_THAT(error, HasSubstr("--task-history"));
}

class NoTaskHistoryTest : public TaskHistoryTest {
 protected:
  NoTaskHistoryTest() : TaskHistoryTest(0) {}
};

TEST_F(NoTaskHistoryTest, AFinishedTaskIsForgottenAtOnceAndItsResultWhenLetGo) {
  ObjectId result = Run("f")[0];
  EXPECT_EQ(scheduler_.Stats().tasks_kept, 0u);
  EXPECT_EQ(scheduler_.Stats().objects_kept, 1u);
  (void)scheduler_.TakeEffects();
  ASSERT_TRUE(scheduler_.RequestObj(driver_, result).ok()) << "still held, still readable";
  std::vector<DeliverEffect> deliveries;
  for (Effect& e : scheduler_.TakeEffects()) {
    if (auto* d = std::get_if<DeliverEffect>(&e)) deliveries.push_back(*d);
  }
  ASSERT_EQ(deliveries.size(), 1u) << "to the driver's store";
  ASSERT_TRUE(scheduler_.DecrementRefCount({result}).ok());
  EXPECT_EQ(scheduler_.Stats().objects_kept, 1u) << "kept while its delivery is under way";
  ASSERT_TRUE(scheduler_.ObjReady(result, store_b_, 8).ok());  // landed: the store drops it
  EXPECT_EQ(scheduler_.Stats().objects_kept, 0u);
  EXPECT_EQ(scheduler_.IncrementRefCount({result}).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(NoTaskHistoryTest, AnObjectLetGoWhileAStoreWaitedForItIsForgottenWhenItLands) {
  absl::StatusOr<SubmitResult> submitted = scheduler_.SubmitTask(driver_, TaskSpec{"f", {}, {}});
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  ObjectId result = submitted->results[0];
  std::vector<ExecuteTaskEffect> runs;
  for (Effect& e : scheduler_.TakeEffects()) {
    if (auto* run = std::get_if<ExecuteTaskEffect>(&e)) runs.push_back(*run);
  }
  ASSERT_EQ(runs.size(), 1u);
  ASSERT_TRUE(scheduler_.RequestObj(driver_, result).ok());  // waits: not computed yet
  ASSERT_TRUE(scheduler_.DecrementRefCount({result}).ok());
  ASSERT_TRUE(scheduler_.ObjReady(result, store_a_, 8).ok());
  ASSERT_TRUE(scheduler_.ReadyForNewTask(worker_, FinishedTask{true, "", runs[0].operation}).ok());
  EXPECT_EQ(scheduler_.Stats().tasks_kept, 0u);
  EXPECT_EQ(scheduler_.Stats().objects_kept, 0u) << "no wait is left to keep it";
}

// Each of SchedulerLimits, at a small value: the call past it is refused RESOURCE_EXHAUSTED
// naming the coordinator's flag, and changes nothing the scheduler shows.
TEST(SchedulerLimitsTest, ACallPastALimitIsRefusedNamingItsFlagAndChangesNothing) {
  ManualClock clock;
  SchedulerOptions options;
  options.limits.max_tasks = 3;
  options.limits.max_objects = 4;
  options.limits.max_workers = 3;
  options.limits.max_stores = 1;
  options.limits.max_functions = 1;
  options.limits.max_export_bytes = 10;
  options.limits.max_ids_per_call = 2;
  TaskScheduler scheduler(clock, options);
  auto refused = [](const absl::Status& s, const std::string& flag) {
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(flag)) << s;
  };
  ASSERT_TRUE(scheduler.RegisterObjStore("10.0.0.1:1").ok());
  refused(scheduler.RegisterObjStore("10.0.0.2:1").status(), "--max-object-stores");
  absl::StatusOr<WorkerRegistration> worker =
      scheduler.RegisterWorker("", "10.0.0.1:1", false, "10.0.0.1:2");
  ASSERT_TRUE(worker.ok()) << worker.status();
  ASSERT_TRUE(scheduler.ReadyForNewTask(worker->worker, std::nullopt).ok());
  ASSERT_TRUE(scheduler.RegisterFunction(worker->worker, "f", 2).ok());
  refused(scheduler.RegisterFunction(worker->worker, "g", 1), "--max-functions");
  ASSERT_TRUE(scheduler.RegisterFunction(worker->worker, "f", 2).ok()) << "a known name";
  absl::StatusOr<WorkerRegistration> driver = scheduler.RegisterWorker("", "10.0.0.1:1", true, "");
  ASSERT_TRUE(driver.ok());
  ASSERT_TRUE(scheduler.RegisterWorker("", "10.0.0.1:1", true, "").ok());
  refused(scheduler.RegisterWorker("", "10.0.0.1:1", true, "").status(), "--max-task-workers");

  ASSERT_TRUE(scheduler.ExportFunction("12345678").ok());
  refused(scheduler.ExportFunction("123"), "--max-export-bytes");
  refused(scheduler.ExportReusableVariable("123"), "--max-export-bytes");

  const WorkerId d = driver->worker;
  absl::StatusOr<SubmitResult> first = scheduler.SubmitTask(d, TaskSpec{"f", {{0, "v"}}, {}});
  ASSERT_TRUE(first.ok()) << first.status();  // 2 of 4 object ids, 1 of 3 tasks
  refused(scheduler.SubmitTask(d, TaskSpec{"f", {{0, "a"}, {0, "b"}, {0, "c"}}, {}}).status(),
          "--max-ids-per-call");
  refused(scheduler.IncrementRefCount({first->results[0], first->results[0], first->results[1]}),
          "--max-ids-per-call");
  refused(scheduler.DecrementRefCount({first->results[0], first->results[0], first->results[1]}),
          "--max-ids-per-call");
  refused(scheduler.AddContainedObjectIDs(first->results[0], {1, 1, 1}), "--max-ids-per-call");
  absl::StatusOr<ObjectId> put = scheduler.PutObj(d);
  ASSERT_TRUE(put.ok()) << put.status();  // 3 of 4 object ids, 2 of 3 tasks and puts
  refused(scheduler.SubmitTask(d, TaskSpec{"f", {{0, "v"}}, {}}).status(), "--max-objects");
  ASSERT_TRUE(scheduler.PutObj(d).ok());  // 4 of 4, 3 of 3
  refused(scheduler.PutObj(d).status(), "--max-tasks");
  refused(scheduler.SubmitTask(d, TaskSpec{"f", {{0, "v"}}, {}}).status(), "--max-tasks");

  SchedulerInfoView info = scheduler.SchedulerInfo();
  EXPECT_EQ(info.operations.size(), 3u);
  EXPECT_EQ(info.reference_count.size(), 5u) << "ids 1 to 4, and entry 0";
  EXPECT_EQ(info.functions.size(), 1u);
  EXPECT_EQ(scheduler.Stats().tasks_submitted, 1u);
}

}  // namespace
}  // namespace cohort::runtime
