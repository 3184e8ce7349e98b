// cohort-demo-task: one task of the demo job. It registers with the coordinator, publishes
// its address, passes barriers, and shuts down, printing each step. It speaks
// tensorflow.CoordinationService with plain generated stubs, as a TensorFlow agent would.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "grpcpp/grpcpp.h"
#include "tensorflow/coordination_service.grpc.pb.h"

namespace tf = tensorflow;
using Clock = std::chrono::steady_clock;

namespace {

int task_id = 0;

void Say(const std::string& what) {
  std::printf("[task %d] %s\n", task_id, what.c_str());
  std::fflush(stdout);
}

bool Check(const grpc::Status& s, const std::string& what) {
  if (!s.ok()) {
    std::fprintf(stderr, "[task %d] %s failed: %s\n", task_id, what.c_str(),
                 s.error_message().c_str());
  }
  return s.ok();
}

std::unique_ptr<grpc::ClientContext> Ctx(int seconds = 60) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  return ctx;
}

long Millis(Clock::time_point since) {
  return static_cast<long>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cohort-demo-task: one task of the demo job (see tools/demo.sh)"};
  std::string coordinator = "127.0.0.1:8476", job = "worker";
  int steps = 3;
  app.add_option("--coordinator", coordinator, "coordinator gRPC address")->capture_default_str();
  app.add_option("--job", job, "job name")->capture_default_str();
  app.add_option("--task", task_id, "task id")->required();
  app.add_option("--steps", steps, "training steps, one barrier each")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto stub = tf::CoordinationService::NewStub(
      grpc::CreateChannel(coordinator, grpc::InsecureChannelCredentials()));
  tf::CoordinatedTask self;
  self.set_job_name(job);
  self.set_task_id(task_id);
  const uint64_t incarnation = std::random_device{}();

  auto start = Clock::now();
  tf::RegisterTaskRequest reg;
  *reg.mutable_source_task() = self;
  reg.set_incarnation(incarnation);
  tf::RegisterTaskResponse reg_r;
  if (!Check(stub->RegisterTask(Ctx().get(), reg, &reg_r), "register")) return 1;
  Say("registered; every task is in after " + std::to_string(Millis(start)) + " ms");

  std::atomic<bool> running{true};
  std::thread heartbeats([&] {
    while (running) {
      tf::HeartbeatRequest hb;
      *hb.mutable_source_task() = self;
      hb.set_incarnation(incarnation);
      tf::HeartbeatResponse r;
      stub->Heartbeat(Ctx(5).get(), hb, &r);
      for (int i = 0; i < 10 && running; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });

  tf::InsertKeyValueRequest insert;
  insert.mutable_kv()->set_key("demo/addresses/" + std::to_string(task_id));
  insert.mutable_kv()->set_value("worker-" + std::to_string(task_id) + ":1234");
  tf::InsertKeyValueResponse ir;
  if (!Check(stub->InsertKeyValue(Ctx().get(), insert, &ir), "publish address")) return 1;
  Say("published " + insert.kv().value());

  bool ok = true;
  for (int step = 0; step <= steps && ok; ++step) {
    tf::BarrierRequest barrier;
    barrier.set_barrier_id("demo/step");
    barrier.set_counter(step);
    barrier.set_barrier_timeout_in_ms(30'000);
    *barrier.mutable_source_task() = self;
    tf::BarrierResponse br;
    auto t = Clock::now();
    ok = Check(stub->Barrier(Ctx().get(), barrier, &br), "barrier");
    if (!ok) break;
    if (step == 0) {
      tf::GetKeyValueDirRequest dir;
      dir.set_directory_key("demo/addresses");
      tf::GetKeyValueDirResponse dr;
      ok = Check(stub->GetKeyValueDir(Ctx().get(), dir, &dr), "read peers");
      Say("passed the first barrier; sees " + std::to_string(dr.kv_size()) + " peers");
    } else {
      tf::IncrementKeyValueRequest incr;
      incr.set_key("demo/steps-done");
      incr.set_increment(1);
      tf::IncrementKeyValueResponse incr_r;
      ok = Check(stub->IncrementKeyValue(Ctx().get(), incr, &incr_r), "count step");
      Say("step " + std::to_string(step) + " done (barrier waited " + std::to_string(Millis(t)) +
          " ms; steps counted so far: " + incr_r.kv().value() + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100 * (task_id + 1)));
  }

  running = false;
  heartbeats.join();
  if (!ok) return 1;
  tf::ShutdownTaskRequest shutdown;
  *shutdown.mutable_source_task() = self;
  tf::ShutdownTaskResponse sr;
  if (!Check(stub->ShutdownTask(Ctx().get(), shutdown, &sr), "shutdown")) return 1;
  Say("shut down through the shutdown barrier");
  return 0;
}
