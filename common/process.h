#pragma once

#include <signal.h>

#include <initializer_list>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace cohort {

// What the main() of every long-running cohort program does alike: its identity from the
// environment, its duration flags, and ending on SIGTERM or SIGINT.

// The variable's value; `fallback` when it is unset or empty.
std::string EnvOr(const char* name, const std::string& fallback = "");

// A duration flag's value: "10s", "500ms", "1h30m". A negative duration is refused, and zero
// unless `zero_ok`; the error is the one line the program prints, naming the flag:
// `--heartbeat-timeout "soon" is not a duration such as 10s, 500ms or 5m`.
absl::StatusOr<absl::Duration> ParseDurationFlag(const std::string& flag, const std::string& text,
                                                 bool zero_ok = true);

// SIGTERM and SIGINT (and `extra`) blocked in the calling thread, and so in every thread it
// starts afterwards, for Wait to take. Made in main() before any thread starts.
class StopSignals {
 public:
  explicit StopSignals(std::initializer_list<int> extra = {});
  // Blocks until one of the signals arrives; returns it.
  int Wait() const;
  // "SIGTERM", "SIGINT", "SIGUSR1", or "signal N".
  static std::string Name(int sig);

 private:
  sigset_t set_;
};

}  // namespace cohort
