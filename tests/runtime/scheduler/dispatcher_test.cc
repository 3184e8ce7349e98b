#include "runtime/scheduler/dispatcher.h"

#include <variant>

#include "gtest/gtest.h"

namespace cohort::runtime::dispatcher_test {

class DispatcherTest : public ::testing::Test {
 protected:
  DispatcherTest() : members_(clock_, SchedulerLimits{}, 40000), functions_(SchedulerLimits{}) {
    members_.AddStore("a:1");
    members_.AddStore("b:1");
  }

  WorkerId IdleWorker(StoreId store, const std::string& address) {
    Worker& w = members_.AddWorker(store, address, false);
    w.state = WorkerState::kIdle;
    EXPECT_TRUE(functions_.Register("f", w.id, 1).ok());
    return w.id;
  }

  Operation& Queued(std::vector<TaskArg> args) {
    Operation& op = operations_.Add();
    op.task.function_name = "f";
    op.task.args = std::move(args);
    operations_.Enqueue(op, clock_.Now());
    return op;
  }

  ManualClock clock_;
  Dispatcher::OnDispatch on_dispatch_;
  MemberTable members_;
  FunctionTable functions_;
  ObjectTable objects_;
  OperationTable operations_;
  std::vector<Effect> effects_;
  SchedulerStats counters_;
  std::vector<std::string> failed_;
  ObjectDirectory directory_{members_, objects_, operations_, effects_, counters_};
  Dispatcher dispatcher_{clock_,
                         on_dispatch_,
                         members_,
                         operations_,
                         functions_,
                         objects_,
                         directory_,
                         effects_,
                         [this](Operation& op, const std::string& error) {
                           op.state = OpState::kFailed;
                           failed_.push_back(error);
                         }};
};

TEST_F(DispatcherTest, ATaskGoesToTheWorkerWhoseStoreHoldsItsArguments) {
  IdleWorker(1, "w:1");
  WorkerId near = IdleWorker(2, "w:2");
  ObjectId arg = objects_.Create(0, 1);
  objects_.FindMutable(arg)->locations.insert(2);
  Operation& op = Queued({TaskArg{arg, ""}});
  dispatcher_.Schedule();
  EXPECT_EQ(op.state, OpState::kRunning);
  EXPECT_EQ(op.worker, near);
  ASSERT_EQ(effects_.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<ExecuteTaskEffect>(effects_[0]));
}

TEST_F(DispatcherTest, ATaskWhoseArgumentIsNowhereYetKeepsItsPlace) {
  IdleWorker(1, "w:1");
  ObjectId arg = objects_.Create(0, 1);
  Operation& op = Queued({TaskArg{arg, ""}});
  dispatcher_.Schedule();
  EXPECT_EQ(op.state, OpState::kQueued);
  EXPECT_EQ(operations_.queue(), (std::deque<OperationId>{op.id}));
}

TEST_F(DispatcherTest, ATaskWhoseArgumentFailedFails) {
  IdleWorker(1, "w:1");
  ObjectId arg = objects_.Create(0, 1);
  objects_.FindMutable(arg)->failed = true;
  Queued({TaskArg{arg, ""}});
  dispatcher_.Schedule();
  ASSERT_EQ(failed_.size(), 1u);
  EXPECT_TRUE(operations_.queue().empty());
}

TEST_F(DispatcherTest, AnArgumentElsewhereIsDeliveredBeforeTheTaskIsSent) {
  WorkerId worker = IdleWorker(2, "w:2");
  ObjectId arg = objects_.Create(0, 1);
  objects_.FindMutable(arg)->locations.insert(1);
  Operation& op = Queued({TaskArg{arg, ""}});
  dispatcher_.Schedule();
  EXPECT_EQ(op.state, OpState::kAssigned);
  ASSERT_EQ(effects_.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<DeliverEffect>(effects_[0]));
  objects_.FindMutable(arg)->locations.insert(2);
  dispatcher_.DispatchAt(2);
  EXPECT_EQ(op.state, OpState::kRunning);
  EXPECT_EQ(members_.worker(worker).current, op.id);
}

}  // namespace cohort::runtime::dispatcher_test
