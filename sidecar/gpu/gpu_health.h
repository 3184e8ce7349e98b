#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "sidecar/gpu/gpu_types.h"

namespace cohort::gpu {

// XIDs an application causes (a bad memory access, a kernel killed or timed out, a graphics
// engine exception from user code) rather than a fault of the GPU: 13, 31, 43, 45, 68, 109.
std::set<uint64_t> DefaultIgnoredXids();

struct HealthPolicy {
  // XIDs that leave a GPU healthy.
  std::set<uint64_t> ignored_xids = DefaultIgnoredXids();
};

// Called once per new problem (see HealthEvent).
using HealthListener = std::function<void(const HealthEvent&)>;

// Asks the driver for GPU `gpu`'s recovery action (see HealthEvent::recovery_action); empty
// when it reports none.
using RecoveryActionReader = std::function<std::optional<unsigned int>(int gpu)>;

// Decides whether each GPU is healthy from what the sampler and the event watcher observe,
// and tells the listener about each new problem. It knows no NVML, so tests feed it directly;
// the recovery action of a problem comes from a reader its owner supplies.
//
// Thread safety: every method may be called from any thread. The listener is called without
// the state lock, one call at a time, in the order problems were found; it may call
// Snapshot(). The reader is called the same way, just before the listener.
class GpuHealthTracker {
 public:
  // GPU i has uuid gpu_uuids[i]; reports about other indices are dropped. The tracker asks
  // `read_recovery_action`, when set, once per new problem, except about a GPU it knows to be
  // lost.
  GpuHealthTracker(HealthPolicy policy, std::vector<std::string> gpu_uuids, HealthListener listener,
                   RecoveryActionReader read_recovery_action = nullptr);

  // The driver raised XID `xid` on the GPU.
  void OnXid(int gpu, uint64_t xid);
  // The driver raised a double-bit ECC event on the GPU.
  void OnDoubleBitEccEvent(int gpu);
  // A sample's ECC counters. The first sample sets the baseline (errors from before the
  // sidecar started are the past); any later increase of a double-bit counter is a problem.
  void OnEccCounts(int gpu, const EccCounts& counts);
  // An NVML call on the GPU answered NVML_ERROR_GPU_IS_LOST; `detail` says which.
  void OnGpuLost(int gpu, const std::string& detail);

  std::vector<GpuHealth> Snapshot() const;

 private:
  struct GpuState {
    GpuHealth health;
    std::set<uint64_t> reported_xids;
    bool reported_double_bit_ecc = false;
    bool reported_lost = false;
    bool have_ecc_baseline = false;
    std::optional<uint64_t> volatile_double_bit;
    std::optional<uint64_t> aggregate_double_bit;
  };

  // Records the problem unless already reported (`already_reported` decides, under the state
  // lock) and tells the listener.
  void Report(int gpu, HealthProblem problem, uint64_t xid, const std::string& reason,
              const std::function<bool(GpuState&)>& already_reported);

  const HealthPolicy policy_;
  const HealthListener listener_;
  const RecoveryActionReader read_recovery_action_;
  // Held across a whole Report, so listener calls are serialised and in order.
  std::mutex report_mu_;
  mutable std::mutex state_mu_;
  std::vector<GpuState> gpus_;  // guarded by state_mu_
};

// A short description of well-known XIDs ("GPU has fallen off the bus"); empty if unknown.
std::string DescribeXid(uint64_t xid);

// What an NVML recovery action (nvmlDeviceGpuRecoveryAction_t) asks for: "none", "GPU reset",
// "node reboot", "drain peer-to-peer traffic", "drain and reset"; "action 5" for a value this
// code does not know.
std::string DescribeRecoveryAction(unsigned int action);

}  // namespace cohort::gpu
