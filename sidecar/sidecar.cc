// Sidecar: its parts, started in order and stopped; a stall of the workload turned into a
// hang report with its stacks.
#include "sidecar/sidecar.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"

namespace cohort {
namespace {

// The stacks' share of a hang report: the coordinator's error and the job's Event carry it,
// and an Event's message is best kept under 1 KiB.
constexpr size_t kHangStackSummaryBytes = 600;

}  // namespace

Sidecar::Sidecar(SidecarOptions options, MetricsRegistry* registry)
    : options_(std::move(options)),
      registry_(registry),
      proxy_(options_.proxy, options_.coordinator, registry),
      objstore_(options_.objstore),
      reporter_(options_.task, &agent_, registry),
      gpus_(options_.gpus, options_.task.pod, registry,
            [this](const gpu::HealthEvent& event) { reporter_.OnGpuProblem(event); }),
      workload_(options_.workload,
                [this](const std::string& what) { reporter_.OnWorkloadExit(what); }),
      progress_(options_.progress,
                {[this] { return proxy_.finished_calls(); },
                 [this] { return static_cast<uint64_t>(proxy_.waiting_calls()); },
                 [this] { return gpus_.BusiestActivity(); }},
                clock_, [this](const std::string& description) { OnStall(description); }),
      registration_(options_.registration, options_.task, &agent_, &proxy_, registry,
                    [this] { OnRegistered(); }),
      endpoints_(options_.http, registry, &registration_, &workload_) {
  // The step and its pace ride on the agent's heartbeats to the coordinator's snapshot, where
  // the operator compares the gang's tasks (stragglers).
  progress_.OnProgress([this](const TaskProgress& progress) { agent_.SetProgress(progress); });
}

Sidecar::~Sidecar() { Stop(); }

absl::Status Sidecar::Start() {
  if (auto s = proxy_.Start(); !s.ok()) return s;
  if (auto s = objstore_.Start(proxy_.PodAccess()); !s.ok()) return s;
  gpus_.Open();
  gpus_.RegisterMetrics();
  registration_.RegisterMetrics();
  reporter_.RegisterMetrics();
  proxy_.RegisterMetrics();
  if (!options_.task_runtime) progress_.RegisterMetrics(registry_);
  if (auto s = endpoints_.Start(); !s.ok()) return s;
  spdlog::info("sidecar of {} serving /metrics /healthz /readyz /v1/cluster on {} (port {})",
               options_.task.Describe(), options_.http.listen, endpoints_.port());

  gpus_.Start();
  if (options_.task_runtime) {
    // Task workers come and go; the scheduler runs their tasks again elsewhere.
    spdlog::info(
        "task runtime pod: object store {} registered; no agent, the workload's exit "
        "is reported to nobody",
        objstore_address());
    registration_.ReadyWithoutRegistering();
    return absl::OkStatus();
  }
  workload_.Start();
  registration_.Start(gpus_.inventory());
  return absl::OkStatus();
}

void Sidecar::OnRegistered() {
  reporter_.SendPending();
  // Timed from the gang's registration, not from the pod's start: image pulls, imports and
  // the other pods' scheduling are not the workload's hang. Registered again after a
  // coordinator restart, it goes on as it was.
  if (!progress_started_.exchange(true)) {
    spdlog::info("watching the workload's progress{}{}",
                 options_.progress.progress_file.empty()
                     ? std::string(" (no progress file)")
                     : " (progress file " + options_.progress.progress_file + ")",
                 options_.progress.timeout == absl::ZeroDuration()
                     ? std::string(": no hang is reported (--progress-timeout 0)")
                     : ": a hang is reported after " +
                           absl::FormatDuration(options_.progress.timeout) + " without any");
    progress_.Start();
  }
}

void Sidecar::OnStall(const std::string& description) {
  // Only a running task hangs: one shut down is done, one in error is being handled.
  auto states = agent_.GetTaskState({{options_.task.workload_job, options_.task.task_id}});
  if (states.ok() && states->size() == 1 && (*states)[0].state != tensorflow::TASKSTATE_CONNECTED) {
    spdlog::info("no progress ({}), but the task is {}: not a hang", description,
                 tensorflow::CoordinatedTaskState_Name((*states)[0].state));
    return;
  }
  std::string stacks;
  const int pid = workload_.pid();
  if (pid <= 0) {
    stacks =
        "no stacks: the sidecar does not see the workload's process (--workload-liveness "
        "process shows it)";
    spdlog::warn("{}", stacks);
  } else {
    StackDump dump = DumpStacks(pid, LooksLikePython(pid), options_.stacks);
    if (dump.tool.empty() || !dump.status.ok()) {
      stacks = absl::StrCat("no stacks: ", dump.status.message());
      spdlog::warn("the workload's stacks (process {}): {}", pid,
                   std::string(dump.status.message()));
    } else {
      spdlog::warn("the workload's stacks (process {}, by {}{}):\n{}", pid, dump.command,
                   dump.truncated ? ", cut" : "", dump.output);
      stacks = absl::StrCat("stacks by ", SummarizeStacks(dump, kHangStackSummaryBytes));
    }
  }
  reporter_.OnHang(absl::StrCat(description, "; ", stacks));
}

void Sidecar::Stop() {
  if (stopped_.exchange(true)) return;
  // Not ready from here on, and nothing registers while the rest stops.
  registration_.BeginStop();
  // The watches report through the agent: they stop before it.
  progress_.Stop();
  workload_.Stop();
  gpus_.Stop();
  registration_.Stop();
  endpoints_.Stop();
  objstore_.Stop();
  proxy_.Stop();
  spdlog::info("sidecar of {} stopped", options_.task.Describe());
}

}  // namespace cohort
