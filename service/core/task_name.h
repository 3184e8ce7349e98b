#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace cohort {

// Who reports a task's error: the task itself, or someone else about it.
enum class ErrorReporter { kTheTask, kSomeoneElse };

// A task of a job: what every protocol's task identity is translated to.
struct TaskName {
  std::string job;
  int32_t id = 0;

  std::string ToString() const { return absl::StrCat("/job:", job, "/task:", id); }

  friend bool operator==(const TaskName& a, const TaskName& b) {
    return a.id == b.id && a.job == b.job;
  }
  friend bool operator!=(const TaskName& a, const TaskName& b) { return !(a == b); }
  friend bool operator<(const TaskName& a, const TaskName& b) {
    return std::tie(a.job, a.id) < std::tie(b.job, b.id);
  }
  template <typename H>
  friend H AbslHashValue(H h, const TaskName& t) {
    return H::combine(std::move(h), t.job, t.id);
  }
};

enum class TaskState { kUninitialized, kDisconnected, kConnected, kError };

const char* TaskStateName(TaskState state);

}  // namespace cohort
