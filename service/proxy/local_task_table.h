#pragma once
// LocalTaskTable: the tasks registered through the sidecar proxy. For each, the incarnation
// it registers again with after an outage, the service's answer to its last forwarded
// heartbeat (its heartbeats are answered here, so that an outage does not kill it), the
// progress its heartbeats last carried (for the heartbeats the proxy forwards), and the
// proxy's own error poll of it, with the clients' polls that wait for that one. It takes no
// lock of its own: UpstreamConnection keeps it under its lock, and answers the polls it hands
// back once unlocked.

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "common/task_progress.h"
#include "service/backend/coordination_backend.h"
#include "service/proxy/upstream_link.h"

namespace cohort {

class LocalTaskTable {
 public:
  using StatusDone = CoordinationBackend::StatusDone;
  // A client's error poll.
  using Poll = std::pair<WaiterId, StatusDone>;
  // A heartbeat answered here: the task's incarnation and the answer.
  struct HeartbeatAnswer {
    uint64_t incarnation = 0;
    absl::Status status;
  };

  // `task` registered as `incarnation`: the generation of the proxy's poll to start for it;
  // none when its poll is out already or has ended.
  std::optional<uint64_t> Register(const TaskName& task, uint64_t incarnation);
  // The proxy's poll `generation` of `task` ended with `status`: the clients' polls, to be
  // answered with it (none when that poll was of an earlier incarnation).
  std::vector<Poll> PollDone(const TaskName& task, uint64_t generation, const absl::Status& status);
  // `task` shut down or was reset, so it is not registered again: the clients' polls.
  std::vector<Poll> Leave(const TaskName& task);
  // Forgets every task: every client's poll.
  std::vector<StatusDone> Clear();

  // The tasks registered and not left, with their incarnations.
  std::vector<std::pair<TaskName, uint64_t>> Registered() const;
  // The progress the heartbeats of `task` last carried since it registered; empty for none.
  TaskProgress Progress(const TaskName& task) const;
  // A heartbeat of `task` (of `incarnation`, when it names one); none when the task is not
  // registered here as that.
  std::optional<HeartbeatAnswer> AnswerHeartbeat(const TaskName& task,
                                                 std::optional<uint64_t> incarnation) const;
  // A heartbeat of `task` (of `incarnation`, when it names one), the link being `link`, as
  // the connection carries it out: answered here with `answer` (the link's failure once it has
  // ended), and forwarded as `incarnation` with `progress` too when `forward`.
  struct LocalHeartbeat {
    absl::Status answer;
    bool forward = false;
    uint64_t incarnation = 0;
    TaskProgress progress{};  // the task's last (Progress)
  };
  // None: the task is not registered here as that, and the coordinator answers. Answered
  // here, a registered task's heartbeat is forwarded while the coordinator is reachable and
  // the task's last answer was OK; its `progress`, when it carries one, replaces the task's.
  std::optional<LocalHeartbeat> HeartbeatHere(const UpstreamLink& link, const TaskName& task,
                                              std::optional<uint64_t> incarnation,
                                              const TaskProgress& progress = {});
  // What the task's heartbeats get from now on: the service refused a registration sent
  // again, or a forwarded heartbeat of `incarnation` (ignored when the task registered since).
  void SetHeartbeatError(const TaskName& task, const absl::Status& error);
  void SetHeartbeatError(const TaskName& task, uint64_t incarnation, const absl::Status& error);
  // A call of a task registered here that carries another incarnation is refused.
  absl::Status CheckIncarnation(const TaskName& task, uint64_t incarnation) const;

  // A client's poll of `task` waits here for the proxy's: the task is registered here and
  // its poll has not ended.
  bool WaitsHere(const TaskName& task) const;
  // Adds the poll `done` of `task`, which WaitsHere. One poll per task, as in the core: the
  // older ones are returned, to be ended.
  std::vector<Poll> AddPoll(const TaskName& task, WaiterId waiter, StatusDone done);
  // Where a client's poll `done` (of `waiter`) of `task` goes, the link being `link`.
  struct PollPlacement {
    absl::Status refused;        // not OK: the link has ended, and `done` is answered with this
    bool forward = false;        // the coordinator answers `done` (not registered here, or ended)
    StatusDone done;             // handed back when refused or forwarded; else it waits here
    std::vector<Poll> replaced;  // waiting here, the older polls it replaced, to be ended
  };
  PollPlacement PlacePoll(const UpstreamLink& link, const TaskName& task, WaiterId waiter,
                          StatusDone done);
  // The client's poll `waiter` goes: none when it is no poll waiting here; else the poll
  // (empty when it was answered already).
  std::optional<StatusDone> TakePoll(WaiterId waiter);

  // The first error propagated to a task registered here (a task reported it); OK: none.
  const absl::Status& propagated() const { return propagated_; }

 private:
  struct Task {
    uint64_t incarnation = 0;
    uint64_t generation = 0;
    bool left = false;  // shut down or reset: not registered again on reconnect
    bool poll_running = false;
    absl::Status heartbeat_error;  // the service's answer to a forwarded heartbeat
    TaskProgress progress;         // its heartbeats' last, of this incarnation
    std::optional<absl::Status> poll_result;
    std::vector<Poll> polls;  // local callers' polls
  };

  absl::flat_hash_map<TaskName, std::unique_ptr<Task>> tasks_;
  absl::flat_hash_map<WaiterId, TaskName> polls_;  // the task each client's poll waits on
  uint64_t next_generation_ = 0;
  absl::Status propagated_;
};

}  // namespace cohort
