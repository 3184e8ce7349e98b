#pragma once
// cohortctl's views of the task runtime (the scheduler on the coordinator's port): its tasks
// and its objects, as tables for people and JSON for programs.

#include <string>

#include "cohort/runtime/v1/messages.pb.h"
#include "nlohmann/json.hpp"

namespace cohort {

nlohmann::json RuntimeTasksJson(const runtime::v1::TaskInfoReply& tasks,
                                const runtime::v1::SchedulerInfoReply& scheduler);
std::string RuntimeTasksTable(const runtime::v1::TaskInfoReply& tasks,
                              const runtime::v1::SchedulerInfoReply& scheduler);
// True when the scheduler has seen any worker or task (a coordinator used only for
// coordination has not).
bool RuntimeInUse(const runtime::v1::TaskInfoReply& tasks,
                  const runtime::v1::SchedulerInfoReply& scheduler);

// Objects still referenced: id, what it is an alias of, its count.
nlohmann::json ObjectsJson(const runtime::v1::SchedulerInfoReply& scheduler);
std::string ObjectsTable(const runtime::v1::SchedulerInfoReply& scheduler);

}  // namespace cohort
