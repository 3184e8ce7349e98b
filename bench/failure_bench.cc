// cohort-failure-bench: how fast the rest of a job learns that a task failed, and what the
// sidecar costs. Real processes on loopback: a coordinator, a victim task
// (cohort-agent-example), its sidecar, and an observer task in this process whose error
// callback stops the clock. Prints one JSON object per scenario.
//   exit:      the victim is SIGKILLed; its sidecar sees the exit and reports it.
//   xid:       a critical XID is injected into the victim's (fake) GPU; the sidecar reports it.
//   heartbeat: the victim is SIGKILLed with no sidecar; the coordinator's heartbeat timeout
//              finds it.
//   hang:      the victim's progress file (written by this process for it, ten times a second)
//              stops changing while the victim runs on and heartbeats; its sidecar
//              (--progress-timeout) records the victim's stacks and reports it hung. Timed
//              from the last progress.
// In each failure round the operator's own follower of the coordinator (CoordinatorWatcher,
// polling every --coordinator-poll as cohort-operator does) watches too: the round also
// times the fault to the operator's view holding the task in error, which the operator's
// restart decision follows by its --failure-settle; and one poll of the job's snapshot (the
// first view after the watch starts: connect, GetClusterSnapshot of every task, reduce).
//   resources: one sidecar on 8 fake GPUs sampling every second: RSS and CPU.
//   resources-progress: the same, with hang detection on and the progress file written ten
//              times a second: what progress tracking adds.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bench/bench_util.h"
#include "bench/task_client.h"
#include "common/command_line.h"
#include "nlohmann/json.hpp"
#include "operator/controller/coordinator_watcher.h"
#include "spdlog/spdlog.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string bin_dir = "build/bin";
  std::string fake_nvml;
  std::string gpu_config;
  std::string work_dir = "/tmp/cohort-failure-bench";
  int rounds = 5;
  int seconds = 30;
  std::string heartbeat_timeout = "10s";
  int tasks = 2;                           // the victim (task 0) and tasks - 1 simulated observers
  std::string progress_timeout = "2s";     // hang: the sidecar's --progress-timeout
  std::string coordinator_poll = "500ms";  // the operator's --coordinator-poll
  std::string failure_settle = "1s";       // the operator's --failure-settle
};

// Writes a step to `path` every 100 ms, as a training loop would report its progress, until
// stopped; `last` is when it last wrote.
class ProgressWriter {
 public:
  explicit ProgressWriter(std::string path) : path_(std::move(path)) {
    thread_ = std::thread([this] {
      for (int64_t step = 0; !stop_; ++step) {
        std::ofstream(path_, std::ios::trunc) << step << "\n";
        last_ = Clock::now();
        for (int i = 0; i < 10 && !stop_; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      }
    });
  }
  ~ProgressWriter() { Stop(); }
  // Stops writing; returns when it last wrote.
  Clock::time_point Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return last_;
  }

 private:
  const std::string path_;
  std::atomic<bool> stop_{false};
  Clock::time_point last_ = Clock::now();
  std::thread thread_;
};

// Only the victim has a sidecar here, so the coordinator's sidecar job has one task. The
// other tasks of the job are simulated in this process over the tensorflow protocol (as the
// agent speaks it): they register, heartbeat every second and park PollForError; a round
// ends when every one of them has been told.

using Process = cohort::bench::ChildProcess;
using cohort::bench::WaitFor;

int FreePort() { return cohort::bench::NextPort(); }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

long ProcStatus(pid_t pid, const char* field) {
  std::istringstream in(ReadFile(absl::StrCat("/proc/", pid, "/status")));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::stol(line.substr(std::string(field).size()));
  }
  return -1;
}

using cohort::bench::CpuSeconds;

struct Cluster {
  int port = 0;
  std::unique_ptr<Process> coordinator;
  std::string address() const { return absl::StrCat("127.0.0.1:", port); }
};

Cluster StartCoordinator(const Options& o, const std::string& dir) {
  Cluster c;
  c.port = FreePort();
  c.coordinator = std::make_unique<Process>(
      std::vector<std::string>{o.bin_dir + "/cohort-coordinator", "--listen", c.address(),
                               "--http-listen", "", "--job", absl::StrCat("worker=", o.tasks),
                               "--auxiliary-job", "sidecar=1", "--heartbeat-timeout",
                               o.heartbeat_timeout, "--log-level", "warn"},
      std::map<std::string, std::string>{}, dir + "/coordinator.log");
  return c;
}

// `progress_file` not empty: hang detection on (--progress-timeout o.progress_timeout).
std::unique_ptr<Process> StartSidecar(const Options& o, const Cluster& c, const std::string& dir,
                                      int http_port, const std::string& pattern,
                                      const std::string& sample_interval,
                                      const std::string& progress_file = "") {
  std::map<std::string, std::string> env = {{"COHORT_COORDINATOR_ADDRESS", c.address()},
                                            {"COHORT_TASK_ID", "0"},
                                            {"COHORT_NUM_TASKS", std::to_string(o.tasks)},
                                            {"POD_NAME", "bench-worker-0"},
                                            {"FAKE_NVML_CONTROL_FIFO", dir + "/fifo"},
                                            {"COHORT_NVML_LIBRARY", o.fake_nvml},
                                            {"FAKE_NVML_CONFIG", o.gpu_config}};
  std::vector<std::string> argv = {o.bin_dir + "/cohort-sidecar",
                                   "--http-listen",
                                   absl::StrCat("127.0.0.1:", http_port),
                                   "--sample-interval",
                                   sample_interval,
                                   "--log-level",
                                   "warn"};
  if (!pattern.empty()) {
    argv.insert(argv.end(), {"--workload-liveness", "process", "--workload-process", pattern});
  }
  if (!progress_file.empty()) {
    argv.insert(argv.end(),
                {"--progress-timeout", o.progress_timeout, "--progress-file", progress_file});
  }
  return std::make_unique<Process>(argv, env, dir + "/sidecar.log");
}

bool Ready(int http_port) {
  std::string cmd = absl::StrCat("curl -sf -o /dev/null http://127.0.0.1:", http_port, "/readyz");
  return std::system(cmd.c_str()) == 0;
}

struct Told {
  double first = -1;      // seconds from the fault to the first observer told
  double all = -1;        // ... to the last one
  double operator_ = -1;  // ... to the operator's view of the coordinator holding the error
  double poll = -1;       // seconds of the operator's first poll of the snapshot
};

// One round of a failure scenario: how long after the fault the observers were told; -1
// when not all of them were.
Told FailureRound(const Options& o, const std::string& scenario, int round) {
  std::string dir = absl::StrCat(o.work_dir, "/", scenario, "-", round);
  std::system(absl::StrCat("mkdir -p ", dir).c_str());
  Cluster cluster = StartCoordinator(o, dir);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::string victim_cmd =
      absl::StrCat("cohort-agent-example --coordinator ", cluster.address(), " --task 0 ");
  auto victim = std::make_unique<Process>(
      std::vector<std::string>{o.bin_dir + "/cohort-agent-example", "--coordinator",
                               cluster.address(), "--task", "0", "--num-tasks",
                               std::to_string(o.tasks), "--steps", "100000", "--step-seconds", "1"},
      std::map<std::string, std::string>{}, dir + "/victim.log");
  int observers = o.tasks - 1;
  auto client = cohort::bench::MakeTaskClient("tensorflow", cluster.address(),
                                              std::min(observers, 16), "worker");
  cohort::bench::Latch registered(observers);
  for (int t = 1; t < o.tasks; ++t) {
    client->RegisterTask(t, [&registered](const grpc::Status& s) { registered.Done(s.ok()); });
  }
  if (!registered.WaitFor(60) || registered.failed() > 0) {
    registered.Wait();
    return {};
  }
  std::atomic<bool> stop_heartbeats{false};
  std::thread heartbeats([&] {
    while (!stop_heartbeats) {
      cohort::bench::Latch sent(observers);
      for (int t = 1; t < o.tasks; ++t) {
        client->Heartbeat(t, [&sent](const grpc::Status& s) { sent.Done(s.ok()); });
      }
      sent.Wait();
      for (int i = 0; i < 10 && !stop_heartbeats; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  });
  std::vector<Clock::time_point> told(o.tasks);
  std::vector<cohort::bench::CallHandle> polls(o.tasks);
  cohort::bench::Latch all_told(observers);
  for (int t = 1; t < o.tasks; ++t) {
    polls[t] = client->PollForError(t, [&, t](const grpc::Status& s) {
      told[t] = Clock::now();
      all_told.Done(!s.ok() && s.error_code() != grpc::StatusCode::CANCELLED);
    });
  }
  int http_port = FreePort();
  std::unique_ptr<Process> sidecar;
  bool ready = true;
  std::unique_ptr<ProgressWriter> progress;
  if (scenario == "hang") progress = std::make_unique<ProgressWriter>(dir + "/progress");
  if (scenario != "heartbeat") {
    // The hung victim is found by its process, as --workload-liveness process finds it in a
    // pod, so that its stacks are recorded before the report.
    sidecar = StartSidecar(o, cluster, dir, http_port,
                           scenario == "exit" || scenario == "hang" ? victim_cmd : "", "5s",
                           scenario == "hang" ? dir + "/progress" : "");
    ready = WaitFor([&] { return Ready(http_port); }, 30);
    // The workload watch scans for the process every 200 ms.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  // The operator's follower of the coordinator: the time of its first view, and of the first
  // view with a task in error.
  absl::Duration poll_interval;
  (void)absl::ParseDuration(o.coordinator_poll, &poll_interval);
  std::atomic<int64_t> first_view_ns{-1}, error_view_ns{-1};
  const Clock::time_point watch_start = Clock::now();
  cohort::controller::CoordinatorWatcher watcher(poll_interval, [&](const std::string& key) {
    const int64_t now_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
            .count();
    auto view = watcher.View(key, 0);
    if (!view) return;
    int64_t unset = -1;
    first_view_ns.compare_exchange_strong(unset, now_ns);
    unset = -1;
    if (!view->errors.empty()) error_view_ns.compare_exchange_strong(unset, now_ns);
  });
  watcher.Watch("bench", cluster.address(), 0, cohort::controller::CoordinatorCredentials{});
  WaitFor([&] { return first_view_ns.load() >= 0; }, 30);
  Told result;
  Clock::time_point fault = Clock::now();
  if (ready) {
    if (scenario == "xid") {
      std::ofstream(dir + "/fifo") << "xid 0 79\n";
    } else if (scenario == "hang") {
      // The watch runs from the sidecar's registration: a few progress reports seen first.
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      fault = progress->Stop();
    } else {
      victim->Kill(SIGKILL);
    }
  }
  bool arrived = ready && all_told.WaitFor(120);
  // The operator's view follows within a poll of the last task told.
  if (arrived) WaitFor([&] { return error_view_ns.load() >= 0; }, 10);
  watcher.StopAll();
  if (!arrived) {
    for (auto& p : polls) {
      if (p) p->TryCancel();
    }
  }
  int64_t not_told = all_told.Wait();
  stop_heartbeats = true;
  heartbeats.join();
  // The last callbacks unwind before the client and its channels go away.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (arrived && not_told == 0) {
    auto [first, last] = std::minmax_element(told.begin() + 1, told.end());
    result.first = std::chrono::duration<double>(*first - fault).count();
    result.all = std::chrono::duration<double>(*last - fault).count();
    const auto at = [](int64_t ns) { return Clock::time_point(std::chrono::nanoseconds(ns)); };
    if (error_view_ns.load() >= 0) {
      result.operator_ = std::chrono::duration<double>(at(error_view_ns.load()) - fault).count();
    }
    if (first_view_ns.load() >= 0) {
      result.poll = std::chrono::duration<double>(at(first_view_ns.load()) - watch_start).count();
    }
  }
  return result;
}

nlohmann::json Failure(const Options& o, const std::string& scenario) {
  std::vector<double> all, first, seen, polls;
  for (int r = 0; r < o.rounds; ++r) {
    Told t = FailureRound(o, scenario, r);
    if (t.all >= 0) {
      all.push_back(t.all);
      first.push_back(t.first);
    }
    if (t.operator_ >= 0) seen.push_back(t.operator_);
    if (t.poll >= 0) polls.push_back(t.poll);
  }
  for (auto* v : {&all, &first, &seen, &polls}) std::sort(v->begin(), v->end());
  nlohmann::json out = {{"scenario", "failure_detection_" + scenario},
                        {"tasks", o.tasks},
                        {"rounds", o.rounds},
                        {"detected", all.size()}};
  if (scenario == "heartbeat") out["heartbeat_timeout"] = o.heartbeat_timeout;
  absl::Duration timeout;
  if (scenario == "hang" && absl::ParseDuration(o.progress_timeout, &timeout)) {
    out["progress_timeout_s"] = absl::ToDoubleSeconds(timeout);
    if (!all.empty()) {
      // What the detection adds to the timeout: the watch's polling, the stacks, the report.
      out["beyond_timeout_p50_ms"] =
          all[all.size() / 2] * 1000 - absl::ToDoubleMilliseconds(timeout);
    }
  }
  if (!all.empty()) {
    // p50 is the time until every other task was told, the round's figure.
    out["p50_ms"] = all[all.size() / 2] * 1000;
    out["min_ms"] = all.front() * 1000;
    out["max_ms"] = all.back() * 1000;
    out["first_told_p50_ms"] = first[first.size() / 2] * 1000;
  }
  out["coordinator_poll"] = o.coordinator_poll;
  if (!seen.empty()) {
    // The restart decision comes --failure-settle after the operator first sees the failure.
    absl::Duration settle;
    (void)absl::ParseDuration(o.failure_settle, &settle);
    out["operator_sees_p50_ms"] = seen[seen.size() / 2] * 1000;
    out["operator_sees_max_ms"] = seen.back() * 1000;
    out["decision_p50_ms"] = seen[seen.size() / 2] * 1000 + absl::ToDoubleMilliseconds(settle);
    out["failure_settle"] = o.failure_settle;
  }
  if (!polls.empty()) {
    out["snapshot_poll_p50_ms"] = polls[polls.size() / 2] * 1000;
    out["snapshot_poll_max_ms"] = polls.back() * 1000;
  }
  return out;
}

// `with_progress`: hang detection on, its progress file written ten times a second.
nlohmann::json Resources(const Options& o, bool with_progress) {
  std::string dir = o.work_dir + (with_progress ? "/resources-progress" : "/resources");
  std::system(absl::StrCat("mkdir -p ", dir).c_str());
  Cluster cluster = StartCoordinator(o, dir);
  int http_port = FreePort();
  std::unique_ptr<ProgressWriter> progress;
  if (with_progress) progress = std::make_unique<ProgressWriter>(dir + "/progress");
  auto sidecar =
      StartSidecar(o, cluster, dir, http_port, "", "1s", with_progress ? dir + "/progress" : "");
  std::this_thread::sleep_for(std::chrono::seconds(5));  // warm up
  double cpu0 = CpuSeconds(sidecar->pid());
  auto t0 = Clock::now();
  // Scrape like Prometheus would, every 15 s, so exposition is part of the cost.
  for (int i = 0; i < o.seconds; ++i) {
    if (i % 15 == 0) {
      std::system(
          absl::StrCat("curl -sf -o /dev/null http://127.0.0.1:", http_port, "/metrics").c_str());
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  double cpu = CpuSeconds(sidecar->pid()) - cpu0;
  return {{"scenario", with_progress ? "sidecar_resources_progress" : "sidecar_resources"},
          {"gpus", 8},
          {"sample_interval_s", 1},
          {"seconds", wall},
          {"cpu_percent_of_one_core", 100 * cpu / wall},
          {"rss_kib", ProcStatus(sidecar->pid(), "VmRSS:")},
          {"rss_peak_kib", ProcStatus(sidecar->pid(), "VmHWM:")}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cohort-failure-bench: failure detection time and sidecar cost",
               "cohort-failure-bench"};
  Options o;
  std::vector<std::string> scenarios = {"exit", "xid",       "heartbeat",
                                        "hang", "resources", "resources-progress"};
  app.add_option("--bin-dir", o.bin_dir, "where cohort-coordinator and cohort-sidecar are")
      ->capture_default_str();
  app.add_option("--fake-nvml", o.fake_nvml, "the test suite's fake libnvidia-ml.so.1")->required();
  app.add_option("--gpu-config", o.gpu_config, "fake node JSON (8 GPUs)")->required();
  app.add_option("--rounds", o.rounds, "measurements per scenario")->capture_default_str();
  app.add_option("--seconds", o.seconds, "resources: how long to measure")->capture_default_str();
  app.add_option("--heartbeat-timeout", o.heartbeat_timeout, "the coordinator's")
      ->capture_default_str();
  app.add_option("--work-dir", o.work_dir, "logs of the programs it starts")->capture_default_str();
  app.add_option("--tasks", o.tasks, "tasks of the job: the victim and simulated observers")
      ->capture_default_str();
  app.add_option("--progress-timeout", o.progress_timeout, "hang: the sidecar's --progress-timeout")
      ->capture_default_str();
  app.add_option("--coordinator-poll", o.coordinator_poll,
                 "how often the operator's follower polls the coordinator (cohort-operator's "
                 "--coordinator-poll)")
      ->capture_default_str();
  app.add_option("--failure-settle", o.failure_settle,
                 "cohort-operator's --failure-settle, added to when it sees a failure for its "
                 "decision")
      ->capture_default_str();
  app.add_option("scenarios", scenarios)->capture_default_str();
  cohort::AddVersionFlag(app);
  if (auto exit_code = cohort::ParseCommandLine(app, argc, argv)) return *exit_code;
  spdlog::set_level(spdlog::level::off);
  for (const std::string& s : scenarios) {
    nlohmann::json result = s == "resources"            ? Resources(o, false)
                            : s == "resources-progress" ? Resources(o, true)
                                                        : Failure(o, s);
    std::printf("%s\n", result.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}
