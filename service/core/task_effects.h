#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "service/core/parked_call.h"
#include "service/core/task_name.h"

namespace cohort {

// What a change of the tasks' state sets off, collected under the service's lock and carried
// out once that lock is released: parked calls to finish, named barriers whose participant
// failed, errors to tell the observer. Parked calls never finish under the lock, because
// their callbacks may call back into the service. Not thread-safe: one thread fills and
// carries out one of these.
struct TaskEffects {
  std::vector<std::function<void()>> after;
  std::vector<std::pair<TaskName, absl::Status>> failed_tasks;
  std::vector<std::pair<TaskName, absl::Status>> propagated;

  template <typename T>
  void Finish(ParkedCallRegistry& registry, std::shared_ptr<ParkedCall> call, T result) {
    after.push_back([&registry, call = std::static_pointer_cast<Parked<T>>(std::move(call)),
                     result = std::move(result)]() mutable {
      if (registry.Claim(*call)) call->Finish(std::move(result));
    });
  }
  template <typename T>
  void FinishAll(ParkedCallRegistry& registry, std::vector<std::shared_ptr<ParkedCall>> calls,
                 const T& result) {
    for (auto& call : calls) Finish<T>(registry, std::move(call), result);
  }
  // For a call that a newer one of the same task replaces: claimed at once, so that the
  // newcomer may take its place under the parked-call limits.
  template <typename T>
  void FinishReplaced(ParkedCallRegistry& registry, std::shared_ptr<ParkedCall> call, T result) {
    if (!registry.Claim(*call)) return;
    after.push_back([call = std::static_pointer_cast<Parked<T>>(std::move(call)),
                     result = std::move(result)]() mutable { call->Finish(std::move(result)); });
  }
};

}  // namespace cohort
