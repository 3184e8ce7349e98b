#include "agent/runtime_views.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace cohort {

namespace {

using Json = nlohmann::json;

std::string FirstLine(const std::string& text) {
  // A Python traceback's last line says what was raised; other messages are one line.
  std::string trimmed = text;
  while (!trimmed.empty() && trimmed.back() == '\n') trimmed.pop_back();
  size_t last = trimmed.rfind('\n');
  return last == std::string::npos ? trimmed : trimmed.substr(last + 1);
}

Json StatusJson(const runtime::v1::TaskStatus& t) {
  Json out = {{"operation", t.operationid()},
              {"function", t.function_name()},
              {"worker", t.worker_address()}};
  if (!t.error_message().empty()) out["error"] = t.error_message();
  return out;
}

}  // namespace

bool RuntimeInUse(const runtime::v1::TaskInfoReply& tasks,
                  const runtime::v1::SchedulerInfoReply& scheduler) {
  return tasks.num_succeeded() > 0 || tasks.failed_task_size() > 0 ||
         tasks.running_task_size() > 0 || scheduler.operationid_size() > 0 ||
         scheduler.avail_worker_size() > 0 || !scheduler.function_table().empty();
}

Json RuntimeTasksJson(const runtime::v1::TaskInfoReply& tasks,
                      const runtime::v1::SchedulerInfoReply& scheduler) {
  Json running = Json::array(), failed = Json::array(), functions = Json::object();
  for (const auto& t : tasks.running_task()) running.push_back(StatusJson(t));
  for (const auto& t : tasks.failed_task()) failed.push_back(StatusJson(t));
  for (const auto& [name, entry] : scheduler.function_table()) {
    functions[name] = {
        {"workers", std::vector<uint64_t>(entry.workerid().begin(), entry.workerid().end())},
        {"returns", entry.num_return_vals()}};
  }
  return {{"queued",
           std::vector<uint64_t>(scheduler.operationid().begin(), scheduler.operationid().end())},
          {"running", running},
          {"succeeded", tasks.num_succeeded()},
          {"failed", failed},
          {"idle_workers",
           std::vector<uint64_t>(scheduler.avail_worker().begin(), scheduler.avail_worker().end())},
          {"functions", functions}};
}

std::string RuntimeTasksTable(const runtime::v1::TaskInfoReply& tasks,
                              const runtime::v1::SchedulerInfoReply& scheduler) {
  std::set<uint64_t> workers;
  for (const auto& [name, entry] : scheduler.function_table()) {
    workers.insert(entry.workerid().begin(), entry.workerid().end());
  }
  std::string out = absl::StrFormat(
      "task runtime: %d workers (%d idle), %d queued, %d running, %d succeeded, %d failed\n",
      workers.size(), scheduler.avail_worker_size(), scheduler.operationid_size(),
      tasks.running_task_size(), tasks.num_succeeded(), tasks.failed_task_size());
  if (tasks.running_task_size() + tasks.failed_task_size() == 0) return out;
  absl::StrAppendFormat(&out, "\n%-10s %-10s %-28s %-22s %s\n", "STATE", "OPERATION", "FUNCTION",
                        "WORKER", "ERROR");
  for (const auto& t : tasks.running_task()) {
    absl::StrAppendFormat(&out, "%-10s %-10d %-28s %-22s\n", "running", t.operationid(),
                          t.function_name(), t.worker_address());
  }
  for (const auto& t : tasks.failed_task()) {
    absl::StrAppendFormat(&out, "%-10s %-10d %-28s %-22s %s\n", "failed", t.operationid(),
                          t.function_name(), t.worker_address().empty() ? "-" : t.worker_address(),
                          FirstLine(t.error_message()));
  }
  return out;
}

Json ObjectsJson(const runtime::v1::SchedulerInfoReply& scheduler) {
  Json objects = Json::array();
  for (int id = 1; id < scheduler.reference_count_size(); ++id) {
    if (scheduler.reference_count(id) == 0) continue;
    Json object = {{"id", id}, {"references", scheduler.reference_count(id)}};
    if (id < scheduler.target_objectid_size() &&
        scheduler.target_objectid(id) != static_cast<uint64_t>(id)) {
      object["alias_of"] = scheduler.target_objectid(id);
    }
    objects.push_back(object);
  }
  return objects;
}

std::string ObjectsTable(const runtime::v1::SchedulerInfoReply& scheduler) {
  Json objects = ObjectsJson(scheduler);
  int64_t total = scheduler.reference_count_size() > 0 ? scheduler.reference_count_size() - 1 : 0;
  std::string out =
      absl::StrFormat("%d objects referenced, of %d ever made\n", objects.size(), total);
  if (objects.empty()) return out;
  absl::StrAppendFormat(&out, "\n%-12s %-12s %s\n", "OBJECT", "REFERENCES", "ALIAS OF");
  for (const Json& o : objects) {
    absl::StrAppendFormat(
        &out, "%-12d %-12d %s\n", o["id"].get<int64_t>(), o["references"].get<int64_t>(),
        o.contains("alias_of") ? absl::StrCat(o["alias_of"].get<uint64_t>()) : "-");
  }
  return out;
}

}  // namespace cohort
