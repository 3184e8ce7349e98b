// A CoordinatedJob's status: read from the API server's JSON, written back, compared, conditions.
#include <cstdint>
#include <limits>
#include <optional>

#include "operator/api/coordinated_job.h"
#include "operator/api/coordinated_job_internal.h"

namespace cohort::api {
namespace {

using internal::Whole;

// A count the API server keeps (metadata, status): 0 when absent or not a count.
int Count(const json& o, const char* key) {
  return static_cast<int>(Whole(o, key, 0, 0, std::numeric_limits<int>::max()).value_or(0));
}

}  // namespace

bool CoordinatorPodStatus::operator==(const CoordinatorPodStatus& o) const {
  return uid == o.uid && container_restarts == o.container_restarts &&
         last_restart_time == o.last_restart_time;
}

bool Condition::operator==(const Condition& o) const {
  return type == o.type && status == o.status && reason == o.reason && message == o.message &&
         last_transition_time == o.last_transition_time &&
         observed_generation == o.observed_generation;
}

bool TaskCounts::operator==(const TaskCounts& o) const {
  return total == o.total && registered == o.registered && ready == o.ready &&
         succeeded == o.succeeded && failed == o.failed;
}

bool TaskRuntimeStatus::operator==(const TaskRuntimeStatus& o) const {
  return succeeded == o.succeeded && failed == o.failed && running == o.running;
}

bool JobStatus::operator==(const JobStatus& o) const {
  return phase == o.phase && restarts == o.restarts && worker_restarts == o.worker_restarts &&
         restarting_workers == o.restarting_workers && uncounted_restarts == o.uncounted_restarts &&
         gang_start_time == o.gang_start_time && coordinator_restarts == o.coordinator_restarts &&
         coordinator_pod == o.coordinator_pod && state_volume == o.state_volume &&
         tasks == o.tasks && task_runtime == o.task_runtime &&
         coordinator_address == o.coordinator_address && start_time == o.start_time &&
         completion_time == o.completion_time && observed_generation == o.observed_generation &&
         conditions == o.conditions && straggler == o.straggler &&
         avoided_nodes == o.avoided_nodes && last_failure == o.last_failure && goodput == o.goodput;
}

std::string FormatRfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

std::string FormatRfc3339Millis(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

std::optional<absl::Time> ParseRfc3339(const std::string& text) {
  absl::Time t;
  std::string error;
  if (text.empty() || !absl::ParseTime(absl::RFC3339_full, text, &t, &error)) return std::nullopt;
  return t;
}

namespace internal {

JobStatus ParseJobStatus(const json& status, int replicas) {
  JobStatus st;
  st.phase = Str(status, "phase");
  st.restarts = Count(status, "restarts");
  st.uncounted_restarts = Count(status, "uncountedRestarts");
  st.worker_restarts = Count(status, "workerRestarts");
  for (const json& w : status.value("restartingWorkers", json::array())) {
    if (!w.is_object()) continue;
    const std::optional<int64_t> index = Whole(w, "index", -1, 0);
    if (index && *index >= 0 && *index < replicas) {
      st.restarting_workers.push_back(
          {static_cast<int>(*index), Str(w, "uid"), Str(w, "incarnation")});
    }
  }
  st.gang_start_time = ParseRfc3339(Str(status, "gangStartTime"));
  st.coordinator_restarts = Count(status, "coordinatorRestarts");
  const json coordinator_pod = status.value("coordinatorPod", json::object());
  st.coordinator_pod.uid = Str(coordinator_pod, "uid");
  st.coordinator_pod.container_restarts = Count(coordinator_pod, "containerRestarts");
  st.coordinator_pod.last_restart_time = ParseRfc3339(Str(coordinator_pod, "lastRestartTime"));
  st.state_volume = Str(status, "coordinatorStateVolume");
  if (status.contains("taskRuntime") && status["taskRuntime"].is_object()) {
    const json& t = status["taskRuntime"];
    st.task_runtime = TaskRuntimeStatus{Whole(t, "succeeded", 0, 0).value_or(0),
                                        Whole(t, "failed", 0, 0).value_or(0),
                                        Whole(t, "running", 0, 0).value_or(0)};
  }
  const json tasks = status.value("tasks", json::object());
  st.tasks.total = Count(tasks, "total");
  st.tasks.registered = Count(tasks, "registered");
  st.tasks.ready = Count(tasks, "ready");
  st.tasks.succeeded = Count(tasks, "succeeded");
  st.tasks.failed = Count(tasks, "failed");
  st.coordinator_address = Str(status, "coordinatorAddress");
  st.start_time = ParseRfc3339(Str(status, "startTime"));
  st.completion_time = ParseRfc3339(Str(status, "completionTime"));
  st.observed_generation = Whole(status, "observedGeneration", 0, 0).value_or(0);
  for (const auto& c : status.value("conditions", json::array())) {
    Condition cond;
    cond.type = Str(c, "type");
    cond.status = Str(c, "status");
    cond.reason = Str(c, "reason");
    cond.message = Str(c, "message");
    cond.last_transition_time = Str(c, "lastTransitionTime");
    cond.observed_generation = c.value("observedGeneration", int64_t{0});
    st.conditions.push_back(cond);
  }
  if (status.contains("straggler") && status["straggler"].is_object()) {
    const json& s = status["straggler"];
    const std::optional<int64_t> worker = Whole(s, "worker", -1, 0);
    const std::optional<absl::Time> since = ParseRfc3339(Str(s, "since"));
    if (worker && *worker >= 0 && *worker < replicas && since &&
        s.value("score", json()).is_number()) {
      st.straggler = StragglerStatus{static_cast<int>(*worker), s["score"].get<double>(), *since,
                                     s.value("reported", false)};
    }
  }
  for (const json& a : status.value("avoidedNodes", json::array())) {
    if (!a.is_object()) continue;
    const std::optional<absl::Time> until = ParseRfc3339(Str(a, "until"));
    const std::string node = Str(a, "node");
    if (node.empty() || !until || st.avoided_nodes.size() >= kMaxAvoidedNodes) continue;
    st.avoided_nodes.push_back({node, *until, Str(a, "reason"), Str(a, "message")});
  }
  if (status.contains("lastFailure") && status["lastFailure"].is_object()) {
    const json& f = status["lastFailure"];
    const std::optional<absl::Time> failed = ParseRfc3339(Str(f, "failedAt"));
    const std::optional<absl::Time> detected = ParseRfc3339(Str(f, "detectedAt"));
    const std::optional<absl::Time> decided = ParseRfc3339(Str(f, "decidedAt"));
    if (failed && detected && decided) {
      FailureTimeline t;
      t.cause = Str(f, "cause");
      for (const json& r : f.value("reasons", json::array())) {
        if (r.is_string()) t.reasons.push_back(r.get<std::string>());
      }
      t.message = Str(f, "message");
      t.failed_at = *failed;
      t.detected_at = *detected;
      t.decided_at = *decided;
      t.recovered_at = ParseRfc3339(Str(f, "recoveredAt"));
      st.last_failure = t;
    }
  }
  if (status.contains("goodput") && status["goodput"].is_object()) {
    const json& g = status["goodput"];
    st.goodput.gang_registered_time = ParseRfc3339(Str(g, "gangRegisteredTime"));
    const json productive = g.value("productiveSeconds", json());
    if (productive.is_number() && productive.get<double>() >= 0) {
      st.goodput.productive_seconds = productive.get<double>();
    }
    const json startup = g.value("startupSeconds", json());
    if (startup.is_number() && startup.get<double>() >= 0) {
      st.goodput.startup_seconds = startup.get<double>();
    }
  }
  return st;
}

}  // namespace internal

json StatusToJson(const JobStatus& st) {
  json out = json::object();
  if (!st.phase.empty()) out["phase"] = st.phase;
  out["restarts"] = st.restarts;
  if (st.uncounted_restarts > 0) out["uncountedRestarts"] = st.uncounted_restarts;
  if (st.worker_restarts > 0) out["workerRestarts"] = st.worker_restarts;
  if (!st.restarting_workers.empty()) {
    json list = json::array();
    for (const RestartingWorker& w : st.restarting_workers) {
      json entry = {{"index", w.index}, {"uid", w.uid}};
      if (!w.incarnation.empty()) entry["incarnation"] = w.incarnation;
      list.push_back(entry);
    }
    out["restartingWorkers"] = list;
  }
  if (st.gang_start_time) out["gangStartTime"] = FormatRfc3339(*st.gang_start_time);
  out["coordinatorRestarts"] = st.coordinator_restarts;
  const CoordinatorPodStatus& pod = st.coordinator_pod;
  if (!pod.uid.empty() || pod.container_restarts != 0 || pod.last_restart_time) {
    json j = {{"containerRestarts", pod.container_restarts}};
    if (!pod.uid.empty()) j["uid"] = pod.uid;
    if (pod.last_restart_time) j["lastRestartTime"] = FormatRfc3339(*pod.last_restart_time);
    out["coordinatorPod"] = j;
  }
  if (!st.state_volume.empty()) out["coordinatorStateVolume"] = st.state_volume;
  out["tasks"] = {{"total", st.tasks.total},
                  {"registered", st.tasks.registered},
                  {"ready", st.tasks.ready},
                  {"succeeded", st.tasks.succeeded},
                  {"failed", st.tasks.failed}};
  if (st.task_runtime) {
    out["taskRuntime"] = {{"succeeded", st.task_runtime->succeeded},
                          {"failed", st.task_runtime->failed},
                          {"running", st.task_runtime->running}};
  }
  if (!st.coordinator_address.empty()) out["coordinatorAddress"] = st.coordinator_address;
  if (st.start_time) out["startTime"] = FormatRfc3339(*st.start_time);
  if (st.completion_time) out["completionTime"] = FormatRfc3339(*st.completion_time);
  out["observedGeneration"] = st.observed_generation;
  json conditions = json::array();
  for (const auto& c : st.conditions) {
    json j = {{"type", c.type}, {"status", c.status}};
    if (!c.reason.empty()) j["reason"] = c.reason;
    if (!c.message.empty()) j["message"] = c.message;
    if (!c.last_transition_time.empty()) j["lastTransitionTime"] = c.last_transition_time;
    j["observedGeneration"] = c.observed_generation;
    conditions.push_back(j);
  }
  out["conditions"] = conditions;
  if (const auto& s = st.straggler) {
    out["straggler"] = {{"worker", s->worker},
                        {"score", s->score},
                        {"since", FormatRfc3339(s->since)},
                        {"reported", s->reported}};
  }
  if (!st.avoided_nodes.empty()) {
    json avoided = json::array();
    for (const AvoidedNode& a : st.avoided_nodes) {
      avoided.push_back({{"node", a.node},
                         {"until", FormatRfc3339(a.until)},
                         {"reason", a.reason},
                         {"message", a.message}});
    }
    out["avoidedNodes"] = avoided;
  }
  if (const auto& f = st.last_failure) {
    json t = {{"cause", f->cause},
              {"reasons", f->reasons},
              {"message", f->message},
              {"failedAt", FormatRfc3339Millis(f->failed_at)},
              {"detectedAt", FormatRfc3339Millis(f->detected_at)},
              {"decidedAt", FormatRfc3339Millis(f->decided_at)}};
    if (f->recovered_at) t["recoveredAt"] = FormatRfc3339Millis(*f->recovered_at);
    out["lastFailure"] = t;
  }
  const Goodput& g = st.goodput;
  if (g.gang_registered_time || g.productive_seconds > 0 || g.startup_seconds) {
    json goodput = {{"productiveSeconds", g.productive_seconds}};
    if (g.gang_registered_time)
      goodput["gangRegisteredTime"] = FormatRfc3339Millis(*g.gang_registered_time);
    if (g.startup_seconds) goodput["startupSeconds"] = *g.startup_seconds;
    out["goodput"] = goodput;
  }
  return out;
}

void SetCondition(std::vector<Condition>* conditions, const std::string& type,
                  const std::string& status, const std::string& reason, const std::string& message,
                  absl::Time now, int64_t generation) {
  for (auto& c : *conditions) {
    if (c.type != type) continue;
    if (c.status != status) c.last_transition_time = FormatRfc3339(now);
    c.status = status;
    c.reason = reason;
    c.message = message;
    c.observed_generation = generation;
    return;
  }
  conditions->push_back({type, status, reason, message, FormatRfc3339(now), generation});
}

const Condition* FindCondition(const std::vector<Condition>& conditions, const std::string& type) {
  for (const auto& c : conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

}  // namespace cohort::api
