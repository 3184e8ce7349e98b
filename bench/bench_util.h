// Small measuring tools of the load generator: a latch, latency samples with percentiles,
// and a process's RSS and CPU time from /proc.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace cohort::bench {

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Counts outstanding calls; Wait() returns the number that failed once all are done.
class Latch {
 public:
  explicit Latch(int64_t n) : n_(n) {}
  void Done(bool ok) {
    std::lock_guard<std::mutex> l(mu_);
    if (!ok) ++failed_;
    if (--n_ == 0) cv_.notify_all();
  }
  int64_t Wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return n_ <= 0; });
    return failed_;
  }
  // False when the deadline passed first.
  bool WaitFor(double seconds) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::duration<double>(seconds), [&] { return n_ <= 0; });
  }
  int64_t failed() {
    std::lock_guard<std::mutex> l(mu_);
    return failed_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t n_;
  int64_t failed_ = 0;
};

// Latency samples in seconds. Not thread-safe: give each sequential client its own, then
// Merge().
class Samples {
 public:
  void Add(double seconds) { values_.push_back(seconds); }
  void Merge(const Samples& other) {
    values_.insert(values_.end(), other.values_.begin(), other.values_.end());
  }
  size_t size() const { return values_.size(); }
  // Nearest-rank percentile, q in [0, 100].
  double Percentile(double q) {
    if (values_.empty()) return 0;
    std::sort(values_.begin(), values_.end());
    size_t rank = static_cast<size_t>(q / 100.0 * static_cast<double>(values_.size()) + 0.999999);
    rank = std::clamp<size_t>(rank, 1, values_.size());
    return values_[rank - 1];
  }
  // {"count", "p50_ms", "p99_ms", "max_ms"}.
  nlohmann::json Summary() {
    return {{"count", values_.size()},
            {"p50_ms", Percentile(50) * 1e3},
            {"p99_ms", Percentile(99) * 1e3},
            {"max_ms", Percentile(100) * 1e3}};
  }

 private:
  std::vector<double> values_;
};

// A child process (posix_spawn), its stdout and stderr in `log`; SIGKILLed and reaped when
// this goes away, or by Kill.
class ChildProcess {
 public:
  ChildProcess(std::vector<std::string> argv, const std::map<std::string, std::string>& env,
               const std::string& log);
  ~ChildProcess() { Kill(9); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  void Kill(int signal);

 private:
  pid_t pid_ = -1;
};

// A loopback port nothing listens on, for a server started next: below the ephemeral range,
// never the same twice in this process.
int NextPort();

// Polls `condition` every 20 ms until it holds (true) or `seconds` pass (false).
bool WaitFor(const std::function<bool()>& condition, double seconds);

// Resident set size of a process in KiB, or -1.
long RssKiB(int pid);
// User plus system CPU seconds a process has used, or -1.
double CpuSeconds(int pid);

}  // namespace cohort::bench
