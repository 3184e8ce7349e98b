#pragma once
// Private parts of CoordinationService, shared by its .cc files.

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "service/core/coordination_service.h"
#include "service/core/errors.h"

namespace cohort {

inline absl::Status ServiceError(absl::Status status) {
  return WithServiceError(std::move(status), {});
}

namespace internal {
inline std::string TaskList(const std::vector<TaskName>& tasks, size_t limit = 10) {
  std::vector<std::string> names;
  for (size_t i = 0; i < tasks.size() && i < limit; ++i) names.push_back(tasks[i].ToString());
  std::string out = absl::StrJoin(names, ", ");
  if (tasks.size() > limit) absl::StrAppend(&out, " and ", tasks.size() - limit, " more");
  return out;
}
}  // namespace internal

template <typename Vec, typename Pred>
void RemoveIf(Vec* v, Pred pred) {
  v->erase(std::remove_if(v->begin(), v->end(), pred), v->end());
}

struct CoordinationService::Task {
  TaskName name;
  const JobConfig* job = nullptr;
  TaskState state = TaskState::kDisconnected;
  uint64_t incarnation = 0;
  bool ever_registered = false;
  bool at_shutdown_barrier = false;
  // Registered, waiting at the register barrier: still disconnected, sends no heartbeats.
  bool awaiting_register = false;
  absl::Time disconnected_at = absl::InfinitePast();
  absl::Status error;
  // Written by heartbeats under the shared lock.
  std::atomic<int64_t> last_heartbeat_ns{0};
  std::vector<std::shared_ptr<ParkedCall>> polls;
};

// A rendezvous of a fixed set of tasks: device exchange or GetAliveTasks.
struct CoordinationService::Group {
  std::vector<TaskName> members;  // sorted
  std::map<TaskName, std::string> arrived;
  std::vector<std::shared_ptr<ParkedCall>> calls;
  bool done = false;
  absl::Status error;
  std::vector<std::string> devices;  // device groups: the answer, in member order
};

// Work that follows a state change and runs once the lock is released: finishing parked
// calls, failing barriers, telling the observer.
struct CoordinationService::Effects {
  std::vector<std::function<void()>> after;
  std::vector<std::pair<TaskName, absl::Status>> failed_tasks;
  std::vector<std::pair<TaskName, absl::Status>> propagated;

  template <typename T>
  void Finish(ParkedCallRegistry& registry, std::shared_ptr<Parked<T>> call, T result) {
    after.push_back([&registry, call = std::move(call), result = std::move(result)]() mutable {
      if (registry.Claim(*call)) call->Finish(std::move(result));
    });
  }
  // For a call that a newer one of the same task replaces: claimed at once, so that the
  // newcomer may take its place under the parked-call limits.
  template <typename T>
  void FinishReplaced(ParkedCallRegistry& registry, std::shared_ptr<Parked<T>> call, T result) {
    if (!registry.Claim(*call)) return;
    after.push_back([call = std::move(call), result = std::move(result)]() mutable {
      call->Finish(std::move(result));
    });
  }
};

}  // namespace cohort
