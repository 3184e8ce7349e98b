#include "bench/kv_driver.h"

#include <atomic>
#include <memory>

#include "bench/bench_util.h"

namespace cohort::bench {
namespace {

class TaskKvDriver : public KvDriver {
 public:
  TaskKvDriver(TaskClient* tasks, int num_tasks) : tasks_(tasks), num_tasks_(num_tasks) {}

  void Set(int client, const std::string& key, const std::string& value, Done done) override {
    tasks_->Insert(Task(client), key, value, std::move(done));
  }

  void Get(int client, const std::string& key, ValueDone done) override {
    tasks_->TryGet(Task(client), key, std::move(done));
  }

  void WaitCycle(int client, const std::string& key, const std::string& value,
                 WaitDone done) override {
    // Two calls in flight: the parked get and the insert; the cycle goes on when both ended.
    struct Cycle {
      Clock::time_point start = Clock::now();
      std::atomic<int> pending{2};
      std::atomic<bool> ok{true};
      double waited = 0;
      WaitDone done;
    };
    auto cycle = std::make_shared<Cycle>();
    cycle->done = std::move(done);
    int task = Task(client);
    auto finish_one = [this, cycle, task, key] {
      if (--cycle->pending != 0) return;
      tasks_->Delete(task, key, [cycle](const grpc::Status& s) {
        cycle->done(cycle->ok.load() && s.ok(), cycle->waited);
      });
    };
    size_t want = value.size();
    tasks_->BlockingGet(task, key, [cycle, want, finish_one](const grpc::Status& s, size_t got) {
      cycle->waited = Seconds(cycle->start, Clock::now());
      if (!s.ok() || got != want) cycle->ok = false;
      finish_one();
    });
    tasks_->Insert(task, key, value, [cycle, finish_one](const grpc::Status& s) {
      if (!s.ok()) cycle->ok = false;
      finish_one();
    });
  }

 private:
  int Task(int client) const { return client % num_tasks_; }

  TaskClient* const tasks_;
  const int num_tasks_;
};

}  // namespace

std::unique_ptr<KvDriver> MakeTaskKvDriver(TaskClient* tasks, int num_tasks) {
  return std::make_unique<TaskKvDriver>(tasks, num_tasks);
}

}  // namespace cohort::bench
