// cohort-restart-bench: what a coordinator crash costs a job whose tasks talk to it through
// their pods' sidecars (cohort-sidecar --proxy-listen), the coordinator keeping its state in
// --state-dir. Real processes on loopback: the coordinator, P sidecars, and N tasks simulated
// in this process over the tensorflow protocol, spread over the sidecars. Prints one JSON
// object per scenario.
//   restart:  every task in a closed loop of key reads; the coordinator is SIGKILLed and
//             started again at once on the same directory; for each task, the time from the
//             kill until a read it issued after the kill came back. Calls that failed are
//             counted (the point is that none do).
//   latency:  one client's sequential key reads, straight to the coordinator and through a
//             sidecar; the sidecar's added latency per call.
//   memory:   the coordinator's resident memory per task with three calls parked per task
//             (an error poll, a blocking get, a job-state watch, as jaxlib keeps), the tasks
//             behind sidecars, and for comparison the same tasks connected straight to it.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "bench/task_client.h"
#include "common/command_line.h"
#include "nlohmann/json.hpp"

namespace {

using cohort::bench::ChildProcess;
using cohort::bench::Clock;
using cohort::bench::Latch;
using cohort::bench::Samples;
using cohort::bench::TaskClient;

struct Options {
  std::string bin_dir = "build/bin";
  std::string work_dir = "/tmp/cohort-restart-bench";
  int tasks = 1000;
  int proxies = 50;
  int rounds = 3;
  int latency_calls = 2000;
  std::string outage_tolerance = "60s";
  double cpu_window_s = 10;
};

std::string Address(int port) { return absl::StrCat("127.0.0.1:", port); }

bool Accepting(int port) {
  auto channel = cohort::bench::OwnChannel(Address(port), 0);
  return channel->WaitForConnected(std::chrono::system_clock::now() +
                                   std::chrono::milliseconds(200));
}

// A coordinator with durable state, and the sidecars in front of it.
class Job {
 public:
  // `with_proxies`: the sidecars start too (StartProxies, when later).
  Job(const Options& o, const std::string& dir, bool with_proxies)
      : o_(o), dir_(dir), port_(cohort::bench::NextPort()) {
    std::system(absl::StrCat("rm -rf ", dir, " && mkdir -p ", dir).c_str());
    StartCoordinator();
    if (with_proxies) StartProxies();
  }

  void StartProxies() {
    const Options& o = o_;
    const std::string& dir = dir_;
    for (int p = 0; p < o.proxies; ++p) {
      int proxy_port = cohort::bench::NextPort();
      proxy_ports_.push_back(proxy_port);
      proxies_.push_back(std::make_unique<ChildProcess>(
          std::vector<std::string>{
              o.bin_dir + "/cohort-sidecar", "--coordinator", coordinator_address(),
              "--proxy-listen", Address(proxy_port), "--outage-tolerance", o.outage_tolerance,
              "--http-listen", Address(cohort::bench::NextPort()), "--job", "worker", "--task",
              std::to_string(p), "--num-tasks", std::to_string(o.proxies), "--log-level", "warn"},
          std::map<std::string, std::string>{}, absl::StrCat(dir, "/sidecar-", p, ".log")));
    }
  }

  void StartCoordinator() {
    coordinator_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{
            o_.bin_dir + "/cohort-coordinator", "--listen", coordinator_address(), "--http-listen",
            "", "--job", absl::StrCat("worker=", o_.tasks), "--auxiliary-job",
            absl::StrCat("sidecar=", std::max(o_.proxies, 1)), "--heartbeat-timeout", "600s",
            "--register-timeout", "10m", "--state-dir", dir_ + "/state", "--log-level", "warn"},
        std::map<std::string, std::string>{},
        absl::StrCat(dir_, "/coordinator-", ++starts_, ".log"));
  }

  bool WaitReady() {
    if (!cohort::bench::WaitFor([&] { return Accepting(port_); }, 60)) return false;
    for (int port : proxy_ports_) {
      if (!cohort::bench::WaitFor([&] { return Accepting(port); }, 60)) return false;
    }
    return true;
  }

  std::string coordinator_address() const { return Address(port_); }
  int coordinator_port() const { return port_; }
  ChildProcess& coordinator() { return *coordinator_; }
  const std::vector<int>& proxy_ports() const { return proxy_ports_; }
  std::vector<int> proxy_pids() const {
    std::vector<int> pids;
    for (const auto& p : proxies_) pids.push_back(p->pid());
    return pids;
  }

 private:
  const Options& o_;
  const std::string dir_;
  const int port_;
  int starts_ = 0;
  std::unique_ptr<ChildProcess> coordinator_;
  std::vector<int> proxy_ports_;
  std::vector<std::unique_ptr<ChildProcess>> proxies_;
};

// The N tasks, each on the client of its sidecar (task % P), or all on one client straight
// to the coordinator.
class Tasks {
 public:
  Tasks(const Options& o, Job& job, bool through_proxies) : n_(o.tasks) {
    if (through_proxies) {
      for (int port : job.proxy_ports()) {
        clients_.push_back(cohort::bench::MakeTaskClient("tensorflow", Address(port), 1, "worker"));
      }
    } else {
      clients_.push_back(cohort::bench::MakeTaskClient("tensorflow", job.coordinator_address(),
                                                       std::min(n_, 40), "worker"));
    }
  }
  TaskClient& of(int task) { return *clients_[task % clients_.size()]; }
  int size() const { return n_; }

  // Registers every task (through the register barrier); the number that failed.
  int64_t RegisterAll() {
    Latch done(n_);
    for (int t = 0; t < n_; ++t) {
      of(t).RegisterTask(t, [&done](const grpc::Status& s) { done.Done(s.ok()); });
    }
    if (!done.WaitFor(300)) return n_;
    return done.failed();
  }

 private:
  const int n_;
  std::vector<std::unique_ptr<TaskClient>> clients_;
};

nlohmann::json RestartRound(const Options& o, int round) {
  Job job(o, absl::StrCat(o.work_dir, "/restart-", round), true);
  nlohmann::json out = {{"round", round}};
  if (!job.WaitReady()) return {{"error", "the coordinator or a sidecar did not start"}};
  Tasks tasks(o, job, true);
  if (int64_t failed = tasks.RegisterAll(); failed > 0) {
    return {{"error", absl::StrCat(failed, " tasks failed to register")}};
  }
  {
    Latch put(1);
    tasks.of(0).Insert(0, "bench/config", "x", [&put](const grpc::Status& s) { put.Done(s.ok()); });
    if (put.Wait() > 0) return {{"error", "the first key could not be written"}};
  }

  // Every task reads in a closed loop; after the kill, each records when a read it issued
  // after the kill came back.
  std::atomic<bool> stop{false};
  std::atomic<int64_t> failed{0}, calls{0};
  std::mutex mu;
  Clock::time_point kill_at = Clock::time_point::max();
  std::vector<double> served(tasks.size(), -1);
  int served_count = 0;
  std::function<void(int)> read = [&](int task) {
    if (stop) return;
    Clock::time_point issued = Clock::now();
    tasks.of(task).TryGet(task, "bench/config", [&, task, issued](const grpc::Status& s, size_t) {
      ++calls;
      if (!s.ok()) ++failed;
      {
        std::lock_guard<std::mutex> l(mu);
        if (s.ok() && issued > kill_at && served[task] < 0) {
          served[task] = cohort::bench::Seconds(kill_at, Clock::now());
          ++served_count;
        }
      }
      read(task);
    });
  };
  for (int t = 0; t < tasks.size(); ++t) read(t);
  std::this_thread::sleep_for(std::chrono::seconds(1));

  {
    std::lock_guard<std::mutex> l(mu);
    kill_at = Clock::now();
  }
  job.coordinator().Kill(SIGKILL);
  job.StartCoordinator();
  bool up = cohort::bench::WaitFor([&] { return Accepting(job.coordinator_port()); }, 60);
  double down_s = cohort::bench::Seconds(kill_at, Clock::now());
  bool all = cohort::bench::WaitFor(
      [&] {
        std::lock_guard<std::mutex> l(mu);
        return served_count == tasks.size();
      },
      120);
  stop = true;
  // Let the loops unwind: each ends at its next answer.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  Samples samples;
  {
    std::lock_guard<std::mutex> l(mu);
    for (double s : served) {
      if (s >= 0) samples.Add(s);
    }
  }
  out["coordinator_back_ms"] = up ? down_s * 1000 : -1;
  out["served"] = samples.size();
  out["all_served"] = all;
  out["served_p50_ms"] = samples.Percentile(50) * 1000;
  out["served_max_ms"] = samples.Percentile(100) * 1000;
  out["calls"] = calls.load();
  out["failed_calls"] = failed.load();
  return out;
}

nlohmann::json Restart(const Options& o) {
  nlohmann::json rounds = nlohmann::json::array();
  Samples p50, max;
  int64_t failed = 0;
  bool all = true;
  for (int r = 0; r < o.rounds; ++r) {
    nlohmann::json round = RestartRound(o, r);
    std::fprintf(stderr, "restart round %d: %s\n", r, round.dump().c_str());
    rounds.push_back(round);
    if (round.contains("error") || !round["all_served"].get<bool>()) {
      all = false;
      continue;
    }
    p50.Add(round["served_p50_ms"].get<double>());
    max.Add(round["served_max_ms"].get<double>());
    failed += round["failed_calls"].get<int64_t>();
  }
  return {{"scenario", "coordinator_restart"},
          {"tasks", o.tasks},
          {"sidecars", o.proxies},
          {"rounds", rounds},
          {"every_round_served", all},
          {"served_p50_ms", p50.Percentile(50)},
          {"served_max_ms", max.Percentile(100)},
          {"failed_calls", failed}};
}

Samples SequentialReads(TaskClient& client, int n) {
  Samples s;
  for (int i = 0; i < n; ++i) {
    Latch done(1);
    Clock::time_point t0 = Clock::now();
    client.TryGet(0, "bench/config",
                  [&done](const grpc::Status& st, size_t) { done.Done(st.ok()); });
    done.Wait();
    s.Add(cohort::bench::Seconds(t0, Clock::now()));
  }
  return s;
}

nlohmann::json Latency(const Options& o) {
  Options one = o;
  one.tasks = 1;
  one.proxies = 1;
  Job job(one, o.work_dir + "/latency", true);
  if (!job.WaitReady()) return {{"scenario", "sidecar_latency"}, {"error", "did not start"}};
  auto direct = cohort::bench::MakeTaskClient("tensorflow", job.coordinator_address(), 1, "worker");
  auto proxied =
      cohort::bench::MakeTaskClient("tensorflow", Address(job.proxy_ports()[0]), 1, "worker");
  Latch put(1);
  direct->Insert(0, "bench/config", "x", [&put](const grpc::Status& s) { put.Done(s.ok()); });
  put.Wait();
  SequentialReads(*direct, 200);  // warm up both paths
  SequentialReads(*proxied, 200);
  Samples d = SequentialReads(*direct, o.latency_calls);
  Samples p = SequentialReads(*proxied, o.latency_calls);
  return {{"scenario", "sidecar_latency"},
          {"calls", o.latency_calls},
          {"direct", d.Summary()},
          {"through_sidecar", p.Summary()},
          {"added_p50_us", (p.Percentile(50) - d.Percentile(50)) * 1e6},
          {"added_p99_us", (p.Percentile(99) - d.Percentile(99)) * 1e6}};
}

// The coordinator's RSS per task with three calls parked per task.
nlohmann::json MemoryRun(const Options& o, bool through_proxies) {
  Job job(o, absl::StrCat(o.work_dir, "/memory-", through_proxies ? "proxied" : "direct"),
          /*with_proxies=*/false);
  if (!job.WaitReady()) return {{"error", "did not start"}};
  std::this_thread::sleep_for(std::chrono::seconds(1));
  // Before any client: what the sidecars' own connections, registrations and park streams
  // cost is part of the tasks' cost (with one task per pod, most of it).
  const long empty = cohort::bench::RssKiB(job.coordinator().pid());
  if (through_proxies) {
    job.StartProxies();
    if (!job.WaitReady()) return {{"error", "the sidecars did not start"}};
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  long base = cohort::bench::RssKiB(job.coordinator().pid());
  Tasks tasks(o, job, through_proxies);
  if (tasks.RegisterAll() > 0) return {{"error", "registration failed"}};
  std::this_thread::sleep_for(std::chrono::seconds(2));
  long registered = cohort::bench::RssKiB(job.coordinator().pid());
  std::vector<cohort::bench::CallHandle> parked;
  for (int t = 0; t < tasks.size(); ++t) tasks.of(t).WatchVersion(t);
  std::atomic<int64_t> ended{0};
  for (int t = 0; t < tasks.size(); ++t) {
    parked.push_back(tasks.of(t).PollForError(t, [&ended](const grpc::Status&) { ++ended; }));
    parked.push_back(tasks.of(t).BlockingGet(t, absl::StrCat("never/", t),
                                             [&ended](const grpc::Status&, size_t) { ++ended; }));
    parked.push_back(tasks.of(t).WatchState(t, [&ended](const grpc::Status&) { ++ended; }));
  }
  std::this_thread::sleep_for(std::chrono::seconds(3));
  long loaded = cohort::bench::RssKiB(job.coordinator().pid());
  long sidecars_rss = 0;
  for (int pid : job.proxy_pids()) sidecars_rss += cohort::bench::RssKiB(pid);
  // CPU in steady state: every task heartbeats once in the window (jaxlib's interval is 10 s)
  // while its three calls stay parked; the coordinator's and the sidecars' CPU time over it.
  auto cpu = [&job] {
    double coordinator = cohort::bench::CpuSeconds(job.coordinator().pid());
    double sidecars = 0;
    for (int pid : job.proxy_pids()) sidecars += cohort::bench::CpuSeconds(pid);
    return std::pair{coordinator, sidecars};
  };
  const auto cpu_before = cpu();
  const absl::Time window_start = absl::Now();
  const absl::Duration window = absl::Seconds(o.cpu_window_s);
  Latch beats(tasks.size());
  for (int t = 0; t < tasks.size(); ++t) {
    absl::SleepFor(window_start + window * t / tasks.size() - absl::Now());
    tasks.of(t).Heartbeat(t, [&beats](const grpc::Status& s) { beats.Done(s.ok()); });
  }
  absl::SleepFor(window_start + window - absl::Now());
  const auto cpu_after = cpu();
  const double window_s = absl::ToDoubleSeconds(absl::Now() - window_start);
  if (!beats.WaitFor(30) || beats.failed() > 0) return {{"error", "heartbeats failed"}};
  // Every call must still be parked when the memory is read, or the figure means nothing.
  const int64_t ended_early = ended.load();
  for (auto& call : parked) call->TryCancel();
  cohort::bench::WaitFor([&] { return ended.load() >= static_cast<int64_t>(parked.size()); }, 30);
  if (ended_early > 0) {
    return {{"error", absl::StrCat(ended_early, " of ", parked.size(),
                                   " parked calls ended before the memory was read")}};
  }
  return {{"through_sidecars", through_proxies},
          {"tasks", o.tasks},
          {"sidecars", through_proxies ? o.proxies : 0},
          {"rss_base_kib", base},
          {"rss_registered_kib", registered},
          {"rss_loaded_kib", loaded},
          {"parked_calls", parked.size()},
          {"kib_per_task_registered", static_cast<double>(registered - base) / o.tasks},
          {"kib_per_task", static_cast<double>(loaded - base) / o.tasks},
          {"rss_empty_kib", empty},
          // With the sidecars' connections: (loaded - empty) / N.
          {"kib_per_task_with_sidecars", static_cast<double>(loaded - empty) / o.tasks},
          {"tasks_per_sidecar",
           through_proxies ? static_cast<double>(o.tasks) / std::max(o.proxies, 1) : 0.0},
          {"sidecars_rss_kib", sidecars_rss},
          {"sidecar_kib_per_task", static_cast<double>(sidecars_rss) / o.tasks},
          {"cpu_window_s", window_s},
          {"coordinator_cpu_ms_per_task_per_min",
           (cpu_after.first - cpu_before.first) * 1e3 * 60 / window_s / o.tasks},
          {"sidecar_cpu_ms_per_task_per_min",
           (cpu_after.second - cpu_before.second) * 1e3 * 60 / window_s / o.tasks}};
}

nlohmann::json Memory(const Options& o) {
  return {{"scenario", "coordinator_memory_behind_sidecars"},
          {"through_sidecars", MemoryRun(o, true)},
          {"direct", MemoryRun(o, false)}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "cohort-restart-bench: what a coordinator crash costs tasks behind sidecars, the "
      "sidecar's added latency, and the coordinator's memory per task behind sidecars",
      "cohort-restart-bench"};
  Options o;
  std::vector<std::string> scenarios = {"restart", "latency", "memory"};
  app.add_option("--bin-dir", o.bin_dir, "where cohort-coordinator and cohort-sidecar are")
      ->capture_default_str();
  app.add_option("--work-dir", o.work_dir, "logs and state directories")->capture_default_str();
  app.add_option("--tasks", o.tasks, "simulated tasks (N)")->capture_default_str();
  app.add_option("--sidecars", o.proxies, "sidecars the tasks are spread over (P)")
      ->capture_default_str();
  app.add_option("--rounds", o.rounds, "restart: kills, each on a fresh job")
      ->capture_default_str();
  app.add_option("--latency-calls", o.latency_calls, "latency: reads per path")
      ->capture_default_str();
  app.add_option("--outage-tolerance", o.outage_tolerance, "the sidecars'")->capture_default_str();
  app.add_option("--cpu-window", o.cpu_window_s,
                 "memory, pods: seconds over which CPU is measured, each task heartbeating "
                 "once in them")
      ->capture_default_str();
  app.add_option("scenarios", scenarios,
                 "restart, latency, memory (behind sidecars and direct), pods (behind sidecars "
                 "only)")
      ->capture_default_str();
  cohort::AddVersionFlag(app);
  if (auto exit_code = cohort::ParseCommandLine(app, argc, argv)) return *exit_code;
  if (o.tasks < 1 || o.proxies < 1 || o.rounds < 1) {
    std::fprintf(stderr, "cohort-restart-bench: --tasks, --sidecars and --rounds must be >= 1\n");
    return 2;
  }
  for (const std::string& s : scenarios) {
    nlohmann::json result;
    if (s == "restart") {
      result = Restart(o);
    } else if (s == "latency") {
      result = Latency(o);
    } else if (s == "memory") {
      result = Memory(o);
    } else if (s == "pods") {
      result = {{"scenario", "memory_by_tasks_per_sidecar"},
                {"through_sidecars", MemoryRun(o, true)}};
    } else {
      std::fprintf(stderr, "cohort-restart-bench: unknown scenario \"%s\"\n", s.c_str());
      return 2;
    }
    std::printf("%s\n", result.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}
