#pragma once

// The task runtime scheduler's changes as records of the coordinator's state files
// (cohort.state.v1.SchedulerChanges), and back.

#include <functional>

#include "absl/status/statusor.h"
#include "runtime/scheduler/scheduler_state.h"

namespace cohort {

namespace state::v1 {
class SchedulerChanges;
}

void SchedulerChangesToProto(const runtime::SchedulerChanges& changes,
                             state::v1::SchedulerChanges* out);

// Refuses a record whose values no scheduler could have written (an unknown state).
absl::StatusOr<runtime::SchedulerChanges> SchedulerChangesFromProto(
    const state::v1::SchedulerChanges& record);

// The whole state `state` as records no larger than about `max_bytes` each (a snapshot),
// handed to `emit` in order.
void SplitSchedulerState(const runtime::SchedulerChanges& state, size_t max_bytes,
                         const std::function<void(const state::v1::SchedulerChanges&)>& emit);

}  // namespace cohort
