#include "runtime/rpc/task_messages.h"

#include "absl/strings/str_cat.h"

namespace cohort::runtime {

TaskSpec ToTaskSpec(const v1::Task& task) {
  TaskSpec spec;
  spec.function_name = task.name();
  for (const v1::Value& arg : task.arg()) {
    TaskArg a;
    a.id = arg.id();
    if (a.id == 0 && arg.has_obj()) a.value = arg.obj().SerializeAsString();
    spec.args.push_back(std::move(a));
  }
  spec.results.assign(task.result().begin(), task.result().end());
  return spec;
}

absl::StatusOr<v1::Task> ToTaskMessage(const TaskSpec& spec) {
  v1::Task task;
  task.set_name(spec.function_name);
  for (const TaskArg& arg : spec.args) {
    v1::Value* value = task.add_arg();
    if (arg.id != 0) {
      value->set_id(arg.id);
    } else if (!value->mutable_obj()->ParseFromString(arg.value)) {
      return absl::InternalError(
          absl::StrCat("an argument of task ", spec.function_name, " does not parse"));
    }
  }
  for (ObjectId result : spec.results) task.add_result(result);
  return task;
}

void FillSchedulerInfo(const SchedulerInfoView& view, v1::SchedulerInfoReply* out) {
  for (OperationId id : view.queued) out->add_operationid(id);
  for (const auto& [name, entry] : view.functions) {
    v1::FnTableEntry& fn = (*out->mutable_function_table())[name];
    for (WorkerId w : entry.first) fn.add_workerid(w);
    fn.set_num_return_vals(entry.second);
  }
  for (WorkerId w : view.idle_workers) out->add_avail_worker(w);
  for (ObjectId id : view.target_objectid) out->add_target_objectid(id);
  for (int64_t count : view.reference_count) out->add_reference_count(count);
  for (const OperationView& op : view.operations) {
    v1::Operation* operation = out->mutable_computation_graph()->add_operation();
    operation->set_creator_operationid(op.creator);
    if (op.is_put) {
      operation->mutable_put()->set_objectid(op.put_object);
    } else if (auto task = ToTaskMessage(op.task); task.ok()) {
      *operation->mutable_task() = *std::move(task);
    }
  }
}

void FillTaskInfo(const TaskInfoView& view, v1::TaskInfoReply* out) {
  auto fill = [](const TaskStatusView& from, v1::TaskStatus* to) {
    to->set_operationid(from.operation);
    to->set_function_name(from.function_name);
    to->set_worker_address(from.worker_address);
    to->set_error_message(from.error_message);
  };
  for (const TaskStatusView& t : view.failed) fill(t, out->add_failed_task());
  for (const TaskStatusView& t : view.running) fill(t, out->add_running_task());
  out->set_num_succeeded(view.succeeded);
}

}  // namespace cohort::runtime
