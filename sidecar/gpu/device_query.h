#pragma once

#include <string>

#include "sidecar/gpu/nvml_abi.h"

namespace cohort::gpu {

// Calls NVML on behalf of one GPU and notices when any call answers NVML_ERROR_GPU_IS_LOST,
// so the inventory, the sampler and the event watcher all detect a GPU that fell off the bus
// the same way. Once lost, further calls are skipped: a lost GPU stays lost until it is reset,
// and each call to it can block in the driver.
//
// Not thread-safe; make one per reading pass.
class DeviceQuery {
 public:
  explicit DeviceQuery(bool already_lost = false) : lost_(already_lost) {}

  // Calls `fn(args...)` unless the library lacks `fn` (then kErrorFunctionNotFound) or the GPU
  // is known to be lost (then kErrorGpuIsLost). `function_name` is for the lost reason only.
  template <typename Fn, typename... Args>
  nvml::Return Call(const char* function_name, Fn fn, Args... args) {
    if (fn == nullptr) return nvml::kErrorFunctionNotFound;
    if (lost_) return nvml::kErrorGpuIsLost;
    nvml::Return result = fn(args...);
    if (result == nvml::kErrorGpuIsLost) {
      lost_ = true;
      lost_in_ = function_name;
    }
    return result;
  }

  // Call() that only says whether NVML answered success.
  template <typename Fn, typename... Args>
  bool Ok(const char* function_name, Fn fn, Args... args) {
    return Call(function_name, fn, args...) == nvml::kSuccess;
  }

  bool lost() const { return lost_; }
  // The call that first said the GPU is lost; empty if lost before this query began.
  const std::string& lost_in() const { return lost_in_; }

 private:
  bool lost_;
  std::string lost_in_;
};

}  // namespace cohort::gpu
