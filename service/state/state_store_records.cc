// DurableState and its changes as the cohort.state.v1 records the state files hold.
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "service/state/state_store_internal.h"

namespace cohort::state_store_internal {

namespace {

int64_t TimeoutToProto(absl::Duration d) {
  return d == absl::InfiniteDuration() ? -1 : absl::ToInt64Milliseconds(d);
}

}  // namespace

void ToProto(const TaskName& task, pb::Task* out) {
  out->set_job(task.job);
  out->set_id(task.id);
}
TaskName FromProto(const pb::Task& task) { return TaskName{task.job(), task.id()}; }

void ToProto(const absl::Status& status, pb::Status* out) {
  out->set_code(static_cast<int32_t>(status.code()));
  out->set_message(std::string(status.message()));
  status.ForEachPayload([out](absl::string_view url, const absl::Cord& payload) {
    (*out->mutable_payloads())[std::string(url)] = std::string(payload);
  });
}
absl::Status FromProto(const pb::Status& status) {
  if (status.code() == 0) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(status.code()), status.message());
  for (const auto& [url, payload] : status.payloads()) out.SetPayload(url, absl::Cord(payload));
  return out;
}

absl::Duration TimeoutFromProto(int64_t ms) {
  return ms < 0 ? absl::InfiniteDuration() : absl::Milliseconds(ms);
}

void ToProto(const DurableBarrier& barrier, pb::BarrierStarted* out) {
  out->set_id(barrier.id);
  out->set_counter(barrier.counter);
  out->set_all_workload(barrier.all_workload);
  for (const TaskName& t : barrier.participants) ToProto(t, out->add_participants());
  out->set_timeout_ms(TimeoutToProto(barrier.timeout));
}

// The record of each kind of change: what the journal appends, and what a snapshot holds.
pb::Record TaskChangeRecord(const DurableTask& task) {
  pb::Record record;
  pb::TaskChanged* r = record.mutable_task();
  ToProto(task.task, r->mutable_task());
  r->set_state(static_cast<int32_t>(task.state));
  r->set_incarnation(task.incarnation);
  r->set_ever_registered(task.ever_registered);
  ToProto(task.error, r->mutable_error());
  r->set_reason(static_cast<int32_t>(task.reason));
  r->set_reset_request(task.reset_request);
  return record;
}
pb::Record WholeBarrierRecord(WholeBarrierKind kind, const DurableWholeBarrier& barrier) {
  pb::Record record;
  record.mutable_whole_barrier()->set_kind(static_cast<int32_t>(kind));
  record.mutable_whole_barrier()->set_state(barrier.state);
  ToProto(barrier.result, record.mutable_whole_barrier()->mutable_result());
  return record;
}
pb::Record WaitingRecord(WholeBarrierKind kind, const TaskName& task, bool waiting) {
  pb::Record record;
  record.mutable_whole_barrier_waiting()->set_kind(static_cast<int32_t>(kind));
  ToProto(task, record.mutable_whole_barrier_waiting()->mutable_task());
  record.mutable_whole_barrier_waiting()->set_waiting(waiting);
  return record;
}
pb::Record FirstErrorRecord(const absl::Status& error) {
  pb::Record record;
  ToProto(error, record.mutable_first_error()->mutable_error());
  return record;
}
pb::Record DeviceGroupRecord(const std::vector<TaskName>& members,
                             const DurableDeviceGroup* group) {
  pb::Record record;
  pb::DeviceGroup* r = record.mutable_device_group();
  for (const TaskName& t : members) ToProto(t, r->add_members());
  if (group) {
    r->set_present(true);
    ToProto(group->error, r->mutable_error());
    for (const std::string& p : group->payloads) r->add_payloads(p);
  }
  return record;
}
pb::Record KeyPutRecord(const std::string& key, const std::string& value, int64_t revision) {
  pb::Record record;
  record.mutable_key_put()->set_key(key);
  record.mutable_key_put()->set_value(value);
  record.mutable_key_put()->set_revision(revision);
  return record;
}

void JobsToProto(const ServiceConfig& config, google::protobuf::RepeatedPtrField<pb::Job>* out) {
  for (const JobConfig& job : config.jobs) {
    pb::Job* j = out->Add();
    j->set_name(job.name);
    j->set_num_tasks(job.num_tasks);
    j->set_auxiliary(job.auxiliary);
    j->set_recoverable(job.recoverable);
  }
}

}  // namespace cohort::state_store_internal
