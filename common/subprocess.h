// Running a program to completion with a time limit and a bound on what it prints.
//
// Hand-written: Debian 12's libraries offer no small subprocess-with-timeout API for C++. The
// project does use Boost, but header-only (Asio, for the TCPStore server), and Boost.Process
// in Debian 12's Boost 1.74 is its v1: it needs Boost.Filesystem linked, and its timed waits
// (child::wait_for) rest on SIGCHLD and sigtimedwait, which its maintainer calls broken
// (boostorg/process#294) and which misbehave in a program with other threads (#347), as the
// sidecar is. A child spawned with posix_spawn, a pipe and a pidfd under poll() is the
// whole of what is needed.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace cohort {

struct SubprocessResult {
  // The exit status when the program exited; -1 when a signal ended it.
  int exit_code = -1;
  // The signal that ended it; 0 when it exited.
  int signal = 0;
  // Its stdout and stderr, interleaved as written, at most the limit's bytes.
  std::string output;
  // It wrote more than was kept.
  bool truncated = false;

  bool Succeeded() const { return signal == 0 && exit_code == 0; }
  // "exit status 1", "killed by signal 11 (Segmentation fault)".
  std::string Describe() const;
};

// Runs argv (argv[0] a path, or a name looked up on $PATH) with stdin from /dev/null, in a
// process group of its own, with the caller's environment and no signal blocked or handled.
// Returns once it has exited and its output has ended; whatever it left running in its
// process group is then killed. A program still running after `timeout` is killed with its
// whole process group (SIGKILL) and reaped: DeadlineExceeded. One that cannot start:
// NotFound (no such file) or Internal. The child is always reaped: no zombie is left.
// Safe to call from several threads at once.
absl::StatusOr<SubprocessResult> RunSubprocess(const std::vector<std::string>& argv,
                                               absl::Duration timeout, size_t max_output_bytes);

// argv as one line for logs: arguments with spaces or quotes single-quoted.
std::string CommandLineText(const std::vector<std::string>& argv);

}  // namespace cohort
