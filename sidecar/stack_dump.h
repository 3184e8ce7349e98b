// The workload's stacks, recorded before the sidecar reports it hung: by py-spy for a Python
// process, else eu-stack (elfutils) or gdb, whichever the sidecar's image has. The full dump
// goes to the sidecar's log; SummarizeStacks makes the part that fits a Kubernetes Event.
// Needs the workload's processes in sight (the pod shares its process namespace) and ptrace
// (the sidecar container's SYS_PTRACE capability); a tool refused either says so, and the
// next is tried.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace cohort {

struct StackDumpOptions {
  // Where the tools are looked for; empty: $PATH.
  std::vector<std::string> tools_search_path;
  // Each tool's run: one still running then is killed and the next is tried.
  absl::Duration timeout = absl::Seconds(20);
  // What is kept of each tool's output (stdout and stderr together).
  size_t max_output_bytes = 256 * 1024;
};

struct StackDump {
  // "py-spy", "eu-stack" or "gdb": the tool that succeeded, or when none did the last one
  // tried; empty when none was found.
  std::string tool;
  // Its command line, as run.
  std::string command;
  // OK when `tool` succeeded. Otherwise what was tried and why each failed; NotFound when
  // no tool was found.
  absl::Status status;
  // The tool's output (its error output too).
  std::string output;
  bool truncated = false;
  // Tools that ran before `tool` and failed: "py-spy: exit status 1: <its last line>".
  std::vector<std::string> failed;
};

// Process `pid`'s stacks by the first tool found on the search path that succeeds, in this
// order: py-spy (only when `python`), eu-stack, gdb. Blocks while the tools run.
StackDump DumpStacks(pid_t pid, bool python, const StackDumpOptions& options);

// The process runs Python: its executable's name or its argv[0]'s contains "python".
bool LooksLikePython(pid_t pid);

// At most `max_bytes` of valid UTF-8 for a Kubernetes Event's message (about 1 KiB there):
// the tool and the number of threads ("gdb (4 threads):"), then each thread's header line
// and its innermost frames, the main thread's first, the others in the tool's order; ends
// with "…" when cut. A failed dump: "no stacks: " and why.
std::string SummarizeStacks(const StackDump& dump, size_t max_bytes = 900);

}  // namespace cohort
