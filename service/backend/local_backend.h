#pragma once
// LocalBackend: the CoordinationBackend of the coordinator itself, a thin pass-through to
// the in-process core. Calls that answer at once call back before they return, unless a
// change they follow is still on its way to the disk: then from the durable state's thread
// once it is there (CoordinationService::durability_gate).

#include <string>
#include <vector>

#include "common/durability_gate.h"
#include "service/backend/coordination_backend.h"
#include "service/core/coordination_service.h"
#include "service/torch/forwarded_commands.h"

namespace cohort {

class LocalBackend final : public CoordinationBackend {
 public:
  explicit LocalBackend(CoordinationService* service) : service_(service), torch_(service) {}

  uint64_t service_incarnation() const override { return service_->service_incarnation(); }
  WaiterId NewWaiterId() override { return service_->NewWaiterId(); }
  void Cancel(WaiterId waiter, const absl::Status& status) override {
    if (!torch_.Cancel(waiter, status)) service_->Cancel(waiter, status);
  }
  absl::StatusOr<TaskName> ResolveTask(const std::string& job, int32_t id) const override {
    return service_->ResolveTask(job, id);
  }

  void RegisterTask(const CallContext& call, const TaskName& task, uint64_t incarnation,
                    StatusDone done) override;
  void Heartbeat(const CallContext& call, const TaskName& task, std::optional<uint64_t> incarnation,
                 const TaskProgress& progress, StatusDone done) override;
  absl::Status CheckIncarnation(const TaskName& task, uint64_t incarnation) const override {
    return service_->CheckIncarnation(task, incarnation);
  }
  void ShutdownTask(const CallContext& call, const TaskName& task, StatusDone done) override;
  void ResetTask(const CallContext& call, const TaskName& task, StatusDone done) override;
  void ReportError(const CallContext& call, const TaskName& source, const absl::Status& error,
                   ErrorReporter by, FailureReason reason, StatusDone done) override;
  void PollForError(const CallContext& call, const TaskName& task, StatusDone done) override;
  void PropagatedError(const CallContext& call, StatusDone done) override;
  void GetTaskStates(const CallContext& call, std::vector<TaskName> tasks,
                     Done<std::vector<TaskStateInfo>> done) override;
  void WatchJobState(const CallContext& call, const std::string& job, int64_t version,
                     Done<JobStateView> done) override;
  void GetAliveTasks(const CallContext& call, const TaskName& requester,
                     std::vector<TaskName> tasks, Done<std::vector<AliveTask>> done) override;
  void WaitForAllTasks(const CallContext& call, const TaskName& task, std::string devices,
                       Done<std::vector<std::string>> done) override;

  void Barrier(const CallContext& call, const std::string& id, int64_t counter,
               absl::Duration timeout, const TaskName& caller, std::vector<TaskName> tasks,
               Done<int64_t> done) override;
  void CancelBarrier(const CallContext& call, const std::string& id, int64_t counter,
                     const TaskName& caller, StatusDone done) override;

  void InsertKeyValue(const CallContext& call, std::string key, std::string value,
                      bool allow_overwrite, StatusDone done) override;
  void GetKeyValue(const CallContext& call, std::string key, std::optional<absl::Duration> timeout,
                   Done<std::string> done) override;
  void TryGetKeyValue(const CallContext& call, std::string key, Done<std::string> done) override;
  void IncrementKeyValue(const CallContext& call, std::string key, int64_t delta,
                         Done<int64_t> done) override;
  void GetKeyValueDir(const CallContext& call, std::string dir,
                      Done<std::vector<KeyValueEntry>> done) override;
  void DeleteKeyValue(const CallContext& call, std::string key, StatusDone done) override;
  void WatchKeys(const CallContext& call, std::string key, int64_t start_revision,
                 std::function<void()> notify, Done<std::shared_ptr<KeyWatch>> started) override;

  void GetCoordinatorSnapshot(const CallContext& call, Done<CoordinatorSnapshot> done) override;

  void TorchStoreCommand(const CallContext& call, const ForwardedTorchCommand& command,
                         Done<std::string> done) override {
    torch_.Execute(call.waiter, command, Gated(std::move(done)));
  }
  void TorchStoreBatch(const CallContext& /*call*/,
                       const std::vector<ForwardedTorchCommand>& commands,
                       Done<std::vector<absl::StatusOr<std::string>>> done) override {
    Gated(std::move(done))(torch_.ExecuteBatch(commands));
  }

 private:
  // Every answer but a heartbeat's goes out once the changes before it are on disk (the
  // service's durability gate; a parked call's too, when it is released).
  template <typename Result>
  std::function<void(Result)> Gated(std::function<void(Result)> done) const {
    return AnswerAfterDurable(service_->durability_gate(), std::move(done));
  }

  CoordinationService* const service_;
  torch::ForwardedCommands torch_;
};

}  // namespace cohort
