#pragma once

#include <signal.h>

#include <initializer_list>
#include <string>

namespace cohort {

// What the main() of every long-running cohort program does alike: its identity from the
// environment, and ending on SIGTERM or SIGINT (its command line: command_line.h).

// The variable's value; `fallback` when it is unset or empty.
std::string EnvOr(const char* name, const std::string& fallback = "");

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
