#pragma once

// Reading a GPU's telemetry through NVML: one sample at a time (ReadSample), and SM activity,
// which NVML computes from two GPM samples and so needs the GPU's previous one
// (SmActivitySampler).

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "sidecar/gpu/device_query.h"
#include "sidecar/gpu/gpu_types.h"
#include "sidecar/gpu/nvml_abi.h"
#include "sidecar/gpu/nvml_library.h"

namespace cohort::gpu {

// SM activity from NVML's GPU performance monitoring (GPM; Hopper and later, drivers from R520
// on): the share of a GPU's streaming multiprocessors that were busy between two readings
// (NVML_GPM_METRIC_SM_UTIL). Utilisation only says that some kernel ran; SM activity tells a
// GPU filled with work from one where a collective spins on a few SMs, waiting for a peer.
//
// Keeps the GPU's previous GPM sample: each Read takes a new one and measures from the
// previous. A GPU or driver without GPM gives none, and that is not an error.
//
// Not thread-safe: one per GPU, read by one sampling pass at a time.
class SmActivitySampler {
 public:
  // Asks whether `device` has GPM and allocates its two sample buffers. `library` must
  // outlive the sampler. A Read sooner than `min_interval` after the last sample taken
  // repeats the last result instead (NVML refreshes GPM counters every 100 ms), as measured by
  // `now` (null: std::chrono::steady_clock).
  SmActivitySampler(const NvmlLibrary& library, nvml::Device device,
                    std::chrono::milliseconds min_interval,
                    std::function<std::chrono::steady_clock::time_point()> now = nullptr);
  // Frees the sample buffers.
  ~SmActivitySampler();
  SmActivitySampler(const SmActivitySampler&) = delete;
  SmActivitySampler& operator=(const SmActivitySampler&) = delete;

  // False when the GPU or the driver has no GPM; unsupported_reason() then says why.
  bool supported() const { return supported_; }
  const std::string& unsupported_reason() const { return unsupported_reason_; }

  // Takes a GPM sample and returns the SM activity (0..1) since the previous one. None without
  // GPM, on the first call, and when NVML fails (error() says how; the next reading then
  // measures from the last sample that was taken).
  std::optional<double> Read(DeviceQuery* query);
  // Why the last Read gave none on a GPU with GPM: one phrase naming the NVML call and its
  // error. Empty after a reading and before the first.
  const std::string& error() const { return error_; }

 private:
  // The SM activity from last_ to next_; none (and error_ set) when NVML cannot say.
  std::optional<double> Measure(DeviceQuery* query);

  const NvmlLibrary& library_;
  const nvml::Device device_;
  const std::chrono::milliseconds min_interval_;
  const std::function<std::chrono::steady_clock::time_point()> now_;
  bool supported_ = false;
  std::string unsupported_reason_;
  nvml::GpmSample last_ = nullptr;  // the latest sample taken, once have_last_
  nvml::GpmSample next_ = nullptr;  // the buffer the next sample goes into
  bool have_last_ = false;
  std::chrono::steady_clock::time_point last_at_;
  std::optional<double> result_;  // what the last Read returned
  std::string error_;
  // NVML's request, about 19 KB (kGpmMetricCapacity entries): kept, not on the stack.
  std::unique_ptr<nvml::GpmMetricsGet> request_;
};

// Reads one sample of a GPU's telemetry: utilisation, SM activity (when `sm_activity` is not
// null), memory, temperature, power and energy, SM clock, ECC counters, remapped rows, PCIe
// replays. A field the GPU or driver does not support stays empty. When any call finds the
// GPU lost, `query` says so and the sample is empty except for `lost`.
//
// Stateless but for `sm_activity`; NVML is thread-safe, so any thread may call it.
GpuSample ReadSample(const NvmlApi& api, int index, nvml::Device device, DeviceQuery* query,
                     SmActivitySampler* sm_activity = nullptr);

}  // namespace cohort::gpu
