#include "sidecar/gpu/gpu_health.h"

#include <utility>

namespace cohort::gpu {
namespace {

// Compares one double-bit counter with its baseline; describes an increase, else "".
std::string DescribeIncrease(const char* counter, std::optional<uint64_t>* baseline,
                             std::optional<uint64_t> now) {
  if (!now) return "";
  std::string increase;
  if (*baseline && *now > **baseline) {
    increase = "double-bit ECC errors rose from " + std::to_string(**baseline) + " to " +
               std::to_string(*now) + " (" + counter + " counter)";
  }
  // A volatile counter falls back to zero when the driver reloads; follow it down too.
  *baseline = now;
  return increase;
}

}  // namespace

std::set<uint64_t> DefaultIgnoredXids() { return {13, 31, 43, 45, 68, 109}; }

std::string DescribeXid(uint64_t xid) {
  switch (xid) {
    case 48:
      return "double-bit ECC error";
    case 63:
      return "ECC page retirement or row remapping recorded";
    case 64:
      return "ECC page retirement or row remapping failed";
    case 74:
      return "NVLink error";
    case 79:
      return "GPU has fallen off the bus";
    case 92:
      return "high single-bit ECC error rate";
    case 94:
      return "contained ECC error";
    case 95:
      return "uncontained ECC error";
    case 119:
    case 120:
      return "GSP firmware error";
    default:
      return "";
  }
}

std::string DescribeRecoveryAction(unsigned int action) {
  // The values of nvmlDeviceGpuRecoveryAction_t.
  switch (action) {
    case 0:
      return "none";
    case 1:
      return "GPU reset";
    case 2:
      return "node reboot";
    case 3:
      return "drain peer-to-peer traffic";
    case 4:
      return "drain and reset";
    default:
      return "action " + std::to_string(action);
  }
}

GpuHealthTracker::GpuHealthTracker(HealthPolicy policy, std::vector<std::string> gpu_uuids,
                                   HealthListener listener,
                                   RecoveryActionReader read_recovery_action)
    : policy_(std::move(policy)),
      listener_(std::move(listener)),
      read_recovery_action_(std::move(read_recovery_action)) {
  gpus_.resize(gpu_uuids.size());
  for (size_t index = 0; index < gpu_uuids.size(); ++index) {
    gpus_[index].health.gpu_index = static_cast<int>(index);
    gpus_[index].health.gpu_uuid = std::move(gpu_uuids[index]);
  }
}

void GpuHealthTracker::OnXid(int gpu, uint64_t xid) {
  if (policy_.ignored_xids.count(xid) > 0) return;
  std::string description = DescribeXid(xid);
  std::string reason = "XID " + std::to_string(xid) + " (" +
                       (description.empty() ? "critical XID event" : description) + ")";
  Report(gpu, HealthProblem::kCriticalXid, xid, reason,
         [xid](GpuState& state) { return !state.reported_xids.insert(xid).second; });
}

void GpuHealthTracker::OnDoubleBitEccEvent(int gpu) {
  Report(gpu, HealthProblem::kDoubleBitEcc, 0, "double-bit ECC error event from the driver",
         [](GpuState& state) { return std::exchange(state.reported_double_bit_ecc, true); });
}

void GpuHealthTracker::OnEccCounts(int gpu, const EccCounts& counts) {
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    if (gpu < 0 || static_cast<size_t>(gpu) >= gpus_.size()) return;
    GpuState& state = gpus_[gpu];
    if (!state.have_ecc_baseline) {
      state.have_ecc_baseline = true;
      state.volatile_double_bit = counts.volatile_double_bit;
      state.aggregate_double_bit = counts.aggregate_double_bit;
      return;
    }
    reason = DescribeIncrease("volatile", &state.volatile_double_bit, counts.volatile_double_bit);
    std::string aggregate =
        DescribeIncrease("aggregate", &state.aggregate_double_bit, counts.aggregate_double_bit);
    if (reason.empty()) reason = aggregate;
  }
  if (reason.empty()) return;
  Report(gpu, HealthProblem::kDoubleBitEcc, 0, reason,
         [](GpuState& state) { return std::exchange(state.reported_double_bit_ecc, true); });
}

void GpuHealthTracker::OnGpuLost(int gpu, const std::string& detail) {
  Report(gpu, HealthProblem::kGpuLost, 0, "GPU is lost from the bus (" + detail + ")",
         [](GpuState& state) { return std::exchange(state.reported_lost, true); });
}

void GpuHealthTracker::Report(int gpu, HealthProblem problem, uint64_t xid,
                              const std::string& reason,
                              const std::function<bool(GpuState&)>& already_reported) {
  std::lock_guard<std::mutex> report_lock(report_mu_);
  HealthEvent event;
  bool lost = false;
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    if (gpu < 0 || static_cast<size_t>(gpu) >= gpus_.size()) return;
    GpuState& state = gpus_[gpu];
    if (already_reported(state)) return;
    state.health.healthy = false;
    lost = state.reported_lost;
    event.gpu_index = gpu;
    event.gpu_uuid = state.health.gpu_uuid;
  }
  event.problem = problem;
  event.xid = xid;
  event.reason = reason;
  // Asked without the state lock, as the driver may take a while; report_mu_ still keeps
  // reports in order. A lost GPU answers nothing, so it is not asked.
  if (read_recovery_action_ && !lost) event.recovery_action = read_recovery_action_(gpu);
  if (event.recovery_action) {
    event.reason += "; recovery action: " + DescribeRecoveryAction(*event.recovery_action);
  }
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    gpus_[gpu].health.reasons.push_back(event.reason);
  }
  if (listener_) listener_(event);
}

std::vector<GpuHealth> GpuHealthTracker::Snapshot() const {
  std::lock_guard<std::mutex> lock(state_mu_);
  std::vector<GpuHealth> health;
  for (const GpuState& state : gpus_) health.push_back(state.health);
  return health;
}

}  // namespace cohort::gpu
