#include "service/core/errors.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace cohort {
namespace {

constexpr char kServiceErrorKey[] = "cohort.dev/service-error";
constexpr char kBarrierErrorKey[] = "cohort.dev/barrier-error";

}  // namespace

absl::Status WithServiceError(absl::Status status, const ServiceErrorInfo& info) {
  std::string value = info.is_reported_error ? "1" : "0";
  if (info.source) absl::StrAppend(&value, "\n", info.source->id, "\n", info.source->job);
  status.SetPayload(kServiceErrorKey, absl::Cord(value));
  return status;
}

std::optional<ServiceErrorInfo> GetServiceError(const absl::Status& status) {
  auto payload = status.GetPayload(kServiceErrorKey);
  if (!payload) return std::nullopt;
  // "<reported>[\n<task id>\n<job name>]"; the job name is last so it may hold any byte.
  std::vector<std::string> parts = absl::StrSplit(std::string(*payload), absl::MaxSplits('\n', 2));
  ServiceErrorInfo info;
  info.is_reported_error = !parts.empty() && parts[0] == "1";
  if (parts.size() == 3) {
    TaskName task;
    task.job = parts[2];
    if (absl::SimpleAtoi(parts[1], &task.id)) info.source = task;
  }
  return info;
}

absl::Status WithBarrierError(absl::Status status, const BarrierErrorInfo& info) {
  status.SetPayload(kBarrierErrorKey,
                    absl::Cord(absl::StrCat(info.counter, "\n", info.barrier_id)));
  return status;
}

std::optional<BarrierErrorInfo> GetBarrierError(const absl::Status& status) {
  auto payload = status.GetPayload(kBarrierErrorKey);
  if (!payload) return std::nullopt;
  std::vector<std::string> parts = absl::StrSplit(std::string(*payload), absl::MaxSplits('\n', 1));
  BarrierErrorInfo info;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &info.counter)) return std::nullopt;
  info.barrier_id = parts[1];
  return info;
}

absl::Status Annotate(const absl::Status& status, absl::string_view prefix) {
  absl::Status out(status.code(), absl::StrCat(prefix, status.message()));
  status.ForEachPayload(
      [&out](absl::string_view key, const absl::Cord& value) { out.SetPayload(key, value); });
  return out;
}

FailureReason ReportedErrorReason(const absl::Status& error) {
  // jaxlib's GPU client, run with XLA_PYTHON_CLIENT_ABORT_COLLECTIVES_ON_FAILURE=1 and an
  // --xla_gpu_execution_terminate_timeout, reports an execution that outlived that timeout
  // through its coordination agent (ReportErrorToService) as DEADLINE_EXCEEDED
  // "<action> failed to finish in <timeout>", the action being "[<device>] XLA GPU execution
  // `<module>`": openxla/xla, xla/pjrt/gpu/se_gpu_pjrt_client.cc (the execution timeout
  // handler) and xla/service/gpu/execution_watchdog.cc (the action's name). Its client sends
  // no reason field, so this text is all there is to go by.
  if (error.code() == absl::StatusCode::kDeadlineExceeded &&
      absl::StrContains(error.message(), "XLA GPU execution") &&
      absl::StrContains(error.message(), " failed to finish in ")) {
    return FailureReason::kHang;
  }
  return FailureReason::kReportedError;
}

std::string JoinTaskNames(const std::vector<TaskName>& tasks, size_t limit) {
  std::vector<std::string> names;
  for (size_t i = 0; i < tasks.size() && i < limit; ++i) names.push_back(tasks[i].ToString());
  std::string out = absl::StrJoin(names, ", ");
  if (tasks.size() > limit) absl::StrAppend(&out, " and ", tasks.size() - limit, " more");
  return out;
}

}  // namespace cohort
