// cohort-loadgen: simulates many tasks of the xla.coordination protocol against a running
// coordinator, with gRPC's callback client API (no thread per task), and prints one JSON
// object of measurements per scenario.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "xla/coordination_service.grpc.pb.h"

namespace xc = xla::coordination;
using Clock = std::chrono::steady_clock;

namespace {

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Counts outstanding calls; Wait() returns once all finished.
class Latch {
 public:
  explicit Latch(int n) : n_(n) {}
  void Done(bool ok) {
    std::lock_guard<std::mutex> l(mu_);
    if (!ok) ++failed_;
    if (--n_ == 0) cv_.notify_all();
  }
  int Wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return n_ == 0; });
    return failed_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_;
  int failed_ = 0;
};

long RssKiB(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

struct Harness {
  std::vector<std::unique_ptr<xc::CoordinationService::Stub>> stubs;
  uint64_t service_incarnation = 0;

  Harness(const std::string& address, int channels) {
    for (int i = 0; i < channels; ++i) {
      grpc::ChannelArguments args;
      args.SetInt("cohort.loadgen.channel", i);  // a connection of its own
      args.SetMaxReceiveMessageSize(-1);
      stubs.push_back(xc::CoordinationService::NewStub(
          grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args)));
    }
  }
  xc::CoordinationService::Stub* stub(int task) { return stubs[task % stubs.size()].get(); }
  xc::Incarnations Inc(int task) {
    xc::Incarnations inc;
    inc.set_task_id(task);
    inc.set_task_incarnation(1000 + task);
    inc.set_service_incarnation(service_incarnation);
    return inc;
  }

  // Registers tasks 0..n-1 through the register barrier; returns seconds.
  double RegisterAll(int n) {
    Latch latch(n);
    std::vector<std::unique_ptr<grpc::ClientContext>> ctxs(n);
    std::vector<xc::RegisterTaskRequest> reqs(n);
    std::vector<xc::RegisterTaskResponse> resps(n);
    auto start = Clock::now();
    for (int i = 0; i < n; ++i) {
      ctxs[i] = std::make_unique<grpc::ClientContext>();
      reqs[i].set_source_task_id(i);
      reqs[i].set_incarnation(1000 + i);
      stub(i)->async()->RegisterTask(ctxs[i].get(), &reqs[i], &resps[i],
                                     [&latch](const grpc::Status& s) { latch.Done(s.ok()); });
    }
    int failed = latch.Wait();
    double took = Seconds(start, Clock::now());
    if (failed) std::fprintf(stderr, "%d registrations failed\n", failed);
    service_incarnation = resps[0].service_incarnation();
    return took;
  }

  // One barrier over every task; returns {seconds from first call to all released,
  // seconds from the last call sent to all released}.
  std::pair<double, double> Barrier(int n, const std::string& id) {
    Latch latch(n);
    std::vector<std::unique_ptr<grpc::ClientContext>> ctxs(n);
    std::vector<xc::BarrierRequest> reqs(n);
    std::vector<xc::BarrierResponse> resps(n);
    auto start = Clock::now();
    for (int i = 0; i < n; ++i) {
      ctxs[i] = std::make_unique<grpc::ClientContext>();
      *reqs[i].mutable_incarnations() = Inc(i);
      reqs[i].set_barrier_id(id);
      reqs[i].set_barrier_timeout_in_ms(600'000);
      reqs[i].set_source_task_id(i);
      stub(i)->async()->Barrier(ctxs[i].get(), &reqs[i], &resps[i],
                                [&latch](const grpc::Status& s) { latch.Done(s.ok()); });
    }
    auto sent = Clock::now();
    int failed = latch.Wait();
    auto end = Clock::now();
    if (failed) std::fprintf(stderr, "%d barrier calls failed\n", failed);
    return {Seconds(start, end), Seconds(sent, end)};
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cohort-loadgen: simulated tasks against a running coordinator"};
  std::string address = "127.0.0.1:8476", scenario;
  int tasks = 1000, clients = 64, channels = 16, pid = 0, value_bytes = 100;
  double seconds = 5;
  app.add_option("--coordinator", address, "coordinator address")->capture_default_str();
  app.add_option("scenario", scenario, "register | kv | memory")->required();
  app.add_option("--tasks", tasks, "tasks to simulate (the coordinator's job size)")
      ->capture_default_str();
  app.add_option("--clients", clients, "kv: concurrent clients")->capture_default_str();
  app.add_option("--seconds", seconds, "kv: run time")->capture_default_str();
  app.add_option("--value-bytes", value_bytes, "kv: value size")->capture_default_str();
  app.add_option("--channels", channels, "gRPC connections to spread tasks over")
      ->capture_default_str();
  app.add_option("--pid", pid, "memory: the coordinator's pid, to read its RSS");
  CLI11_PARSE(app, argc, argv);

  Harness h(address, channels);
  nlohmann::json out = {{"scenario", scenario}, {"tasks", tasks}};
  if (scenario == "register") {
    double reg = h.RegisterAll(tasks);
    auto [barrier_total, barrier_release] = h.Barrier(tasks, "bench");
    out["register_seconds"] = reg;
    out["barrier_seconds"] = barrier_total;
    out["barrier_release_after_last_call_seconds"] = barrier_release;
    out["register_and_barrier_seconds"] = reg + barrier_total;
  } else if (scenario == "kv") {
    h.RegisterAll(tasks);
    std::atomic<bool> stop{false};
    std::atomic<long> sets{0}, gets{0}, errors{0};
    std::vector<std::thread> threads;
    std::string value(value_bytes, 'v');
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&, c] {
        auto* stub = h.stub(c);
        long i = 0;
        while (!stop) {
          std::string key = "bench/" + std::to_string(c) + "/" + std::to_string(i++ % 1000);
          xc::InsertKeyValueRequest set;
          *set.mutable_incarnations() = h.Inc(c % tasks);
          set.mutable_kv()->set_key(key);
          set.mutable_kv()->set_value(value);
          set.set_allow_overwrite(true);
          xc::InsertKeyValueResponse sr;
          grpc::ClientContext sc;
          if (stub->InsertKeyValue(&sc, set, &sr).ok())
            ++sets;
          else
            ++errors;
          xc::TryGetKeyValueRequest get;
          *get.mutable_incarnations() = h.Inc(c % tasks);
          get.set_key(key);
          xc::TryGetKeyValueResponse gr;
          grpc::ClientContext gc;
          if (stub->TryGetKeyValue(&gc, get, &gr).ok())
            ++gets;
          else
            ++errors;
        }
      });
    }
    auto start = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop = true;
    for (auto& t : threads) t.join();
    double took = Seconds(start, Clock::now());
    out["clients"] = clients;
    out["value_bytes"] = value_bytes;
    out["set_ops_per_second"] = sets / took;
    out["get_ops_per_second"] = gets / took;
    out["ops_per_second"] = (sets + gets) / took;
    out["errors"] = errors.load();
  } else if (scenario == "memory") {
    long before = RssKiB(pid);
    h.RegisterAll(tasks);
    long registered = RssKiB(pid);
    // Three calls parked per task, as a jaxlib process keeps: PollForError, a blocking get
    // of a key that is never set, and a WatchTasks at the current version.
    xc::WatchTasksRequest first;
    *first.mutable_incarnations() = h.Inc(0);
    first.set_version_number(-1);
    xc::WatchTasksResponse current;
    grpc::ClientContext fc;
    h.stub(0)->WatchTasks(&fc, first, &current);
    std::vector<std::unique_ptr<grpc::ClientContext>> ctxs;
    std::vector<std::unique_ptr<xc::PollForErrorRequest>> polls;
    std::vector<std::unique_ptr<xc::GetKeyValueRequest>> gets;
    std::vector<std::unique_ptr<xc::WatchTasksRequest>> watches;
    std::vector<std::unique_ptr<xc::PollForErrorResponse>> poll_r(tasks);
    std::vector<std::unique_ptr<xc::GetKeyValueResponse>> get_r(tasks);
    std::vector<std::unique_ptr<xc::WatchTasksResponse>> watch_r(tasks);
    Latch ended(3 * tasks);
    for (int i = 0; i < tasks; ++i) {
      auto* stub = h.stub(i);
      ctxs.push_back(std::make_unique<grpc::ClientContext>());
      polls.push_back(std::make_unique<xc::PollForErrorRequest>());
      *polls.back()->mutable_incarnations() = h.Inc(i);
      polls.back()->set_source_task_id(i);
      poll_r[i] = std::make_unique<xc::PollForErrorResponse>();
      stub->async()->PollForError(ctxs.back().get(), polls.back().get(), poll_r[i].get(),
                                  [&ended](const grpc::Status&) { ended.Done(true); });
      ctxs.push_back(std::make_unique<grpc::ClientContext>());
      gets.push_back(std::make_unique<xc::GetKeyValueRequest>());
      *gets.back()->mutable_incarnations() = h.Inc(i);
      gets.back()->set_key("RECEIVED_PREEMPTION_NOTICE");
      get_r[i] = std::make_unique<xc::GetKeyValueResponse>();
      stub->async()->GetKeyValue(ctxs.back().get(), gets.back().get(), get_r[i].get(),
                                 [&ended](const grpc::Status&) { ended.Done(true); });
      ctxs.push_back(std::make_unique<grpc::ClientContext>());
      watches.push_back(std::make_unique<xc::WatchTasksRequest>());
      *watches.back()->mutable_incarnations() = h.Inc(i);
      watches.back()->set_version_number(current.version_number());
      watch_r[i] = std::make_unique<xc::WatchTasksResponse>();
      stub->async()->WatchTasks(ctxs.back().get(), watches.back().get(), watch_r[i].get(),
                                [&ended](const grpc::Status&) { ended.Done(true); });
    }
    std::this_thread::sleep_for(std::chrono::seconds(3));  // let every call arrive and park
    long parked = RssKiB(pid);
    out["rss_kib_before"] = before;
    out["rss_kib_registered"] = registered;
    out["rss_kib_with_parked_calls"] = parked;
    out["bytes_per_task"] = (parked - before) * 1024.0 / tasks;
    for (auto& ctx : ctxs) ctx->TryCancel();
    ended.Wait();
  } else {
    std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
    return 2;
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
