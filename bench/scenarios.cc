#include "bench/scenarios.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <functional>
#include <mutex>
#include <thread>

#include "bench/bench_util.h"

namespace cohort::bench {
namespace {

void SleepSeconds(double s) {
  if (s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

// Samples shared by callbacks on gRPC's threads.
class SharedSamples {
 public:
  void Add(double s) {
    std::lock_guard<std::mutex> l(mu_);
    samples_.Add(s);
  }
  nlohmann::json Summary() {
    std::lock_guard<std::mutex> l(mu_);
    return samples_.Summary();
  }

 private:
  std::mutex mu_;
  Samples samples_;
};

// Sends every task's heartbeat once per interval, spread evenly over it, until Stop().
class HeartbeatPump {
 public:
  HeartbeatPump(TaskClient& client, int tasks, double interval)
      : client_(client), tasks_(tasks), interval_(interval) {
    thread_ = std::thread([this] { Run(); });
  }
  ~HeartbeatPump() { Stop(); }

  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    // Let the calls in flight end before this goes away.
    while (in_flight_.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Blocks until `task` has just sent a heartbeat, then silences it; returns the send time.
  Clock::time_point SilenceAfterNextHeartbeat(int task) {
    watch_ = task;
    std::unique_lock<std::mutex> l(mu_);
    sent_cv_.wait(l, [&] { return watched_sent_; });
    silenced_ = task;
    return last_sent_to_silenced_;
  }

  int64_t sent() const { return sent_.load(); }
  int64_t errors() const { return errors_.load(); }
  int64_t late() const { return late_.load(); }
  // Failed heartbeats by gRPC status code.
  nlohmann::json error_codes() const {
    nlohmann::json out = nlohmann::json::object();
    for (size_t c = 0; c < codes_.size(); ++c) {
      if (codes_[c].load() > 0) out[std::to_string(c)] = codes_[c].load();
    }
    return out;
  }
  SharedSamples& latency() { return latency_; }

 private:
  void Run() {
    Clock::time_point start = Clock::now();
    for (int64_t round = 0; !stop_; ++round) {
      for (int t = 0; t < tasks_ && !stop_; ++t) {
        auto due = start +
                   std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                       interval_ * (static_cast<double>(round) + static_cast<double>(t) / tasks_)));
        auto now = Clock::now();
        if (due > now) {
          std::this_thread::sleep_until(due);
        } else if (now - due > std::chrono::milliseconds(100)) {
          ++late_;
        }
        if (t == silenced_.load()) continue;
        Send(t);
      }
    }
  }

  void Send(int t) {
    auto sent_at = Clock::now();
    ++in_flight_;
    ++sent_;
    if (t == watch_.load()) {
      std::lock_guard<std::mutex> l(mu_);
      last_sent_to_silenced_ = sent_at;
      watched_sent_ = true;
      sent_cv_.notify_all();
    }
    client_.Heartbeat(t, [this, sent_at](const grpc::Status& s) {
      latency_.Add(Seconds(sent_at, Clock::now()));
      if (!s.ok()) {
        ++errors_;
        ++codes_[std::min<size_t>(static_cast<size_t>(s.error_code()), codes_.size() - 1)];
      }
      --in_flight_;
    });
  }

  TaskClient& client_;
  const int tasks_;
  const double interval_;
  std::atomic<bool> stop_{false};
  std::atomic<int> silenced_{-1};
  std::atomic<int> watch_{-1};
  std::atomic<int64_t> sent_{0}, errors_{0}, late_{0}, in_flight_{0};
  std::array<std::atomic<int64_t>, 17> codes_{};
  std::mutex mu_;
  std::condition_variable sent_cv_;
  bool watched_sent_ = false;
  Clock::time_point last_sent_to_silenced_;
  SharedSamples latency_;
  std::thread thread_;
};

// Waits until every connection has delivered what was sent on it before: one heartbeat per
// channel, answered in order behind the earlier calls of that connection.
// False when not every connection answered within `seconds` (the flush is then abandoned:
// its calls are cancelled).
bool Flush(TaskClient& client, const Options& o, double seconds = 120) {
  int n = std::min(o.channels, o.tasks);
  auto latch = std::make_shared<Latch>(n);
  std::vector<CallHandle> calls;
  for (int c = 0; c < n; ++c) {
    calls.push_back(client.Heartbeat(c, [latch](const grpc::Status&) { latch->Done(true); }));
  }
  if (latch->WaitFor(seconds)) return true;
  for (auto& call : calls) call->TryCancel();
  latch->Wait();
  return false;
}

}  // namespace

nlohmann::json RegisterAll(TaskClient& client, const Options& o) {
  auto latch = std::make_shared<Latch>(o.tasks);
  std::vector<CallHandle> calls(o.tasks);
  auto start = Clock::now();
  for (int t = 0; t < o.tasks; ++t) {
    calls[t] = client.RegisterTask(t, [latch](const grpc::Status& s) { latch->Done(s.ok()); });
  }
  // A server that never passes its register barrier is reported, not waited for forever.
  const double limit = 60 + 5e-3 * o.tasks;
  bool passed = latch->WaitFor(limit);
  double took = Seconds(start, Clock::now());
  if (!passed) {
    for (auto& call : calls) call->TryCancel();
  }
  int64_t failed = latch->Wait();
  if (failed) std::fprintf(stderr, "%ld registrations failed\n", static_cast<long>(failed));
  nlohmann::json out = {{"register_seconds", took}, {"register_failed", failed}};
  if (!passed) {
    out["register_seconds"] = nullptr;
    out["register_stalled"] = "the register barrier did not pass within " +
                              std::to_string(static_cast<int>(limit)) + " s";
  }
  return out;
}

nlohmann::json BarrierRounds(TaskClient& client, const Options& o) {
  Samples rounds, releases;
  int64_t failed = 0, early = 0;
  // One burst first: every task calls at once (how a job reaches a barrier after a step).
  double burst = 0;
  {
    Latch latch(o.tasks);
    auto start = Clock::now();
    for (int t = 0; t < o.tasks; ++t) {
      client.Barrier(t, "bench/burst", [&latch](const grpc::Status& s) { latch.Done(s.ok()); });
    }
    failed += latch.Wait();
    burst = Seconds(start, Clock::now());
  }
  double server_cpu = 0, own_cpu = 0;
  // A round that does not finish within this is abandoned and reported: the harness must
  // not hang on a server that never releases a barrier.
  const double round_limit = 60 + 1e-3 * o.tasks;
  int completed = 0;
  std::string stalled;
  for (int r = 0; r < o.rounds && stalled.empty(); ++r) {
    std::string id = "bench/round/" + std::to_string(r);
    std::vector<Clock::time_point> released(o.tasks);
    Latch latch(o.tasks);
    std::vector<CallHandle> calls(o.tasks);
    std::atomic<int> done_before_last{0};
    std::atomic<bool> last_sent{false};
    for (int t = 1; t < o.tasks; ++t) {
      calls[t] = client.Barrier(t, id, [&, t](const grpc::Status& s) {
        released[t] = Clock::now();
        if (!last_sent.load()) ++done_before_last;
        latch.Done(s.ok());
      });
    }
    bool flushed = Flush(client, o, round_limit);
    SleepSeconds(0.02 + 2e-6 * o.tasks);  // let the handlers behind the flush run
    double server0 = o.pid ? CpuSeconds(o.pid) : 0, own0 = CpuSeconds(getpid());
    auto last = Clock::now();
    last_sent = true;
    calls[0] = client.Barrier(0, id, [&](const grpc::Status& s) {
      released[0] = Clock::now();
      latch.Done(s.ok());
    });
    if (!flushed || !latch.WaitFor(round_limit)) {
      stalled = "round " + std::to_string(r) + (flushed ? ": not released" : ": flush stalled") +
                " within " + std::to_string(static_cast<int>(round_limit)) + " s";
      for (auto& call : calls) {
        if (call) call->TryCancel();
      }
      latch.Wait();
      break;
    }
    failed += latch.Wait();
    if (o.pid) server_cpu += CpuSeconds(o.pid) - server0;
    own_cpu += CpuSeconds(getpid()) - own0;
    early += done_before_last.load();
    Clock::time_point end = *std::max_element(released.begin(), released.end());
    rounds.Add(Seconds(last, end));
    for (const auto& at : released) releases.Add(Seconds(last, at));
    ++completed;
  }
  nlohmann::json round = rounds.Summary();
  return {{"burst_seconds", burst},
          {"rounds", completed},
          {"rounds_stalled", stalled.empty() ? nlohmann::json(nullptr) : nlohmann::json(stalled)},
          {"round_p50_ms", round["p50_ms"]},
          {"round_p99_ms", round["p99_ms"]},
          {"round_max_ms", round["max_ms"]},
          {"task_release", releases.Summary()},
          // CPU from the last call to the last release (clock ticks: coarse for small N).
          {"server_cpu_ms_per_round", 1e3 * server_cpu / std::max(1, completed)},
          {"loadgen_cpu_ms_per_round", 1e3 * own_cpu / std::max(1, completed)},
          {"failed_calls", failed},
          {"released_before_last_arrival", early}};
}

nlohmann::json HeartbeatLoad(TaskClient& client, const Options& o) {
  HeartbeatPump pump(client, o.tasks, o.interval);
  SleepSeconds(std::min(o.interval, 2.0));  // one round to warm up
  double cpu0 = o.pid ? CpuSeconds(o.pid) : 0;
  int64_t sent0 = pump.sent();
  auto t0 = Clock::now();
  SleepSeconds(o.seconds);
  double wall = Seconds(t0, Clock::now());
  double cpu = o.pid ? CpuSeconds(o.pid) - cpu0 : 0;
  int64_t sent = pump.sent() - sent0;
  pump.Stop();
  return {{"interval_seconds", o.interval},
          {"seconds", wall},
          {"heartbeats_per_second", sent / wall},
          {"server_cpu_percent_of_one_core", 100 * cpu / wall},
          {"server_cpu_us_per_heartbeat", sent ? 1e6 * cpu / sent : 0},
          {"latency", pump.latency().Summary()},
          {"errors", pump.errors()},
          {"error_codes", pump.error_codes()},
          {"sent_more_than_100ms_late", pump.late()}};
}

nlohmann::json KeyValueLoad(KvDriver& driver, const Options& o) {
  std::string value(o.value_bytes, 'v');
  nlohmann::json phases = nlohmann::json::object();
  bool keys_written = false;
  for (const std::string& op : o.ops) {
    if (op == "get" && !keys_written) {
      Latch latch(o.clients);
      for (int c = 0; c < o.clients; ++c) {
        driver.Set(c, "bench/kv/" + std::to_string(c), value,
                   [&latch](const grpc::Status& s) { latch.Done(s.ok()); });
      }
      latch.Wait();
    }
    std::atomic<bool> stop{false};
    std::atomic<int64_t> ops{0}, errors{0};
    std::vector<Samples> latency(o.clients);
    std::vector<int64_t> counters(o.clients, 0);
    Latch finished(o.clients);
    std::function<void(int)> next = [&](int c) {
      if (stop.load()) {
        finished.Done(true);
        return;
      }
      auto start = Clock::now();
      auto record = [&, c, start](bool ok, double seconds) {
        if (ok) {
          ++ops;
          latency[c].Add(seconds >= 0 ? seconds : Seconds(start, Clock::now()));
        } else {
          ++errors;
        }
        next(c);
      };
      std::string key = "bench/kv/" + std::to_string(c);
      if (op == "set") {
        driver.Set(c, key, value, [record](const grpc::Status& s) { record(s.ok(), -1); });
      } else if (op == "get") {
        size_t want = value.size();
        driver.Get(c, key, [record, want](const grpc::Status& s, size_t got) {
          record(s.ok() && got == want, -1);
        });
      } else {
        key = "bench/wait/" + std::to_string(c) + "/" + std::to_string(counters[c]++);
        driver.WaitCycle(c, key, value, record);
      }
    };
    auto t0 = Clock::now();
    for (int c = 0; c < o.clients; ++c) next(c);
    SleepSeconds(o.seconds);
    stop = true;
    finished.Wait();
    double wall = Seconds(t0, Clock::now());
    SleepSeconds(0.05);  // the last callbacks unwind before this phase's state goes away
    if (op == "set") keys_written = true;
    Samples all;
    for (const auto& s : latency) all.Merge(s);
    double rate = ops.load() / wall;
    phases[op] = {{"ops", ops.load()},
                  {"errors", errors.load()},
                  {"ops_per_second", rate},
                  {"mib_per_second", rate * o.value_bytes / (1 << 20)},
                  {"latency", all.Summary()}};
  }
  return {{"clients", o.clients},
          {"value_bytes", o.value_bytes},
          {"seconds_per_phase", o.seconds},
          {"phases", phases}};
}

nlohmann::json ParkedMemory(TaskClient& client, const Options& o) {
  long before = RssKiB(o.pid);
  nlohmann::json reg = RegisterAll(client, o);
  SleepSeconds(1);
  long registered = RssKiB(o.pid);
  client.WatchVersion(0);
  // Three calls parked per task, as a jaxlib process keeps: PollForError, a blocking get of
  // a key that is never set, and a watch of the task states.
  std::vector<CallHandle> calls;
  calls.reserve(3 * o.tasks);
  Latch ended(3 * static_cast<int64_t>(o.tasks));
  std::atomic<bool> cancelling{false};
  std::atomic<int64_t> ended_early{0};
  auto end = [&](const grpc::Status&) {
    if (!cancelling.load()) ++ended_early;  // did not park: a limit, an error, a missing method
    ended.Done(true);
  };
  for (int t = 0; t < o.tasks; ++t) {
    calls.push_back(client.PollForError(t, end));
    calls.push_back(client.BlockingGet(t, "RECEIVED_PREEMPTION_NOTICE",
                                       [end](const grpc::Status& s, size_t) { end(s); }));
    calls.push_back(client.WatchState(t, end));
  }
  Flush(client, o);
  SleepSeconds(0.5 + o.tasks * 2e-4);  // let every call arrive and park
  long parked = RssKiB(o.pid);
  cancelling = true;
  for (auto& c : calls) c->TryCancel();
  ended.Wait();
  nlohmann::json out = {{"rss_kib_before", before},
                        {"rss_kib_registered", registered},
                        {"rss_kib_with_parked_calls", parked},
                        {"bytes_per_task", (parked - before) * 1024.0 / o.tasks},
                        {"bytes_per_task_registered", (registered - before) * 1024.0 / o.tasks},
                        {"bytes_per_parked_call", (parked - registered) * 1024.0 / (3.0 * o.tasks)},
                        {"calls_not_parked", ended_early.load()}};
  out.update(reg);
  return out;
}

nlohmann::json HeartbeatFailure(TaskClient& client, const Options& o) {
  // Every task heartbeats once at once: a task's clock starts at the register barrier, and
  // the spread-out first round of the pump would reach the last of 16,000 tasks too late
  // for a short timeout (a false alarm caused by the harness, not the server).
  {
    Latch beat(o.tasks);
    for (int t = 0; t < o.tasks; ++t) {
      client.Heartbeat(t, [&beat](const grpc::Status& s) { beat.Done(s.ok()); });
    }
    beat.Wait();
  }
  HeartbeatPump pump(client, o.tasks, o.interval);
  std::vector<Clock::time_point> told(o.tasks);
  std::vector<CallHandle> polls(o.tasks);
  std::atomic<int64_t> errors_seen{0};
  std::mutex first_mu;
  std::string first_answer;  // the first poll's status, to tell a real alarm from a false one
  Latch observers(o.tasks - 1);
  for (int t = 1; t < o.tasks; ++t) {
    polls[t] = client.PollForError(t, [&, t](const grpc::Status& s) {
      told[t] = Clock::now();
      {
        std::lock_guard<std::mutex> l(first_mu);
        if (first_answer.empty()) {
          first_answer = std::to_string(s.error_code()) + ": " + s.error_message().substr(0, 300);
        }
      }
      if (!s.ok() && s.error_code() != grpc::StatusCode::CANCELLED) ++errors_seen;
      observers.Done(!s.ok());
    });
  }
  CallHandle victim_poll = client.PollForError(0, [](const grpc::Status&) {});
  Flush(client, o);
  SleepSeconds(std::max(1.0, o.interval));
  // The victim dies right after a heartbeat; its parked poll goes with its connection.
  Clock::time_point killed = pump.SilenceAfterNextHeartbeat(0);
  victim_poll->TryCancel();
  bool all = observers.WaitFor(o.heartbeat_timeout * 3 + 30);
  pump.Stop();
  if (!all) {
    for (auto& p : polls) {
      if (p) p->TryCancel();
    }
    observers.Wait();
  }
  Samples seconds;
  int64_t before_fault = 0;  // told of a failure while every task was alive: a false alarm
  for (int t = 1; t < o.tasks; ++t) {
    seconds.Add(Seconds(killed, told[t]));
    if (told[t] < killed) ++before_fault;
  }
  double first = seconds.Percentile(0), last = seconds.Percentile(100);
  return {{"heartbeat_timeout_seconds", o.heartbeat_timeout},
          {"heartbeat_interval_seconds", o.interval},
          {"observers", o.tasks - 1},
          {"told", errors_seen.load()},
          {"first_told_seconds", first},
          {"all_told_seconds", last},
          {"all_told_after_timeout_ms", (last - o.heartbeat_timeout) * 1e3},
          {"heartbeat_errors", pump.errors()},
          {"told_before_fault", before_fault},
          {"first_answer", first_answer}};
}

}  // namespace cohort::bench
