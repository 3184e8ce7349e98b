#pragma once

// What the GPU tests share: where the fake NVML libraries and their configs are, a way to
// reach the fake's controls, and a thread-safe collector of health events.

#include <dlfcn.h>
#include <stdlib.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sidecar/gpu/gpu_health.h"
#include "sidecar/gpu/gpu_monitor.h"
#include "sidecar/gpu/gpu_types.h"
#include "tests/support/build_paths.h"

namespace cohort::gpu::testing {

// Absolute paths, worked out from the build directory when the test starts.
inline const std::string kFakeNvmlPath = ::cohort::testing::InBuild(COHORT_FAKE_NVML_PATH);
inline const std::string kOldDriverFakeNvmlPath =
    ::cohort::testing::InBuild(COHORT_FAKE_NVML_OLD_DRIVER_PATH);
inline const char* const kFakeNvml = kFakeNvmlPath.c_str();
inline const char* const kOldDriverFakeNvml = kOldDriverFakeNvmlPath.c_str();

inline std::string TestData(const std::string& name) {
  return ::cohort::testing::InBuild(COHORT_GPU_TEST_DATA_DIR) + "/" + name;
}

// The fake serves the node in testdata/`config` to every NVML initialised while this lives.
class ScopedFakeNode {
 public:
  explicit ScopedFakeNode(const std::string& config) {
    setenv("FAKE_NVML_CONFIG", TestData(config).c_str(), 1);
  }
  ~ScopedFakeNode() { unsetenv("FAKE_NVML_CONFIG"); }
};

// Sets (or, with null, clears) an environment variable for one scope.
class ScopedEnvironment {
 public:
  ScopedEnvironment(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnvironment() {
    if (old_.empty()) {
      unsetenv(name_.c_str());
    } else {
      setenv(name_.c_str(), old_.c_str(), 1);
    }
  }

 private:
  std::string name_;
  std::string old_;
};

// A control function of the fake `library` that a GpuMonitor has loaded. RTLD_NOLOAD hands
// back that same copy, so the control changes what the monitor sees; the pointer is good
// while the monitor lives.
template <typename Fn>
Fn FakeControl(const char* library, const char* name) {
  void* handle = dlopen(library, RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(handle, nullptr) << library << " is not loaded";
  if (handle == nullptr) return nullptr;
  Fn control = reinterpret_cast<Fn>(dlsym(handle, name));
  EXPECT_NE(control, nullptr) << name;
  dlclose(handle);
  return control;
}

// Collects what a GpuMonitor reports: health events from any thread, and log lines.
class MonitorRecorder {
 public:
  GpuMonitorOptions Options(const std::string& library) {
    GpuMonitorOptions options;
    options.library_path = library;
    options.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      logs_.push_back(line);
    };
    options.on_health_event = [this](const HealthEvent& event) {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(event);
      cv_.notify_all();
    };
    options.event_wait_slice = std::chrono::milliseconds(50);
    // Tests sample back to back; the fake's GPM counters need no 100 ms between samples.
    options.sm_activity_min_interval = std::chrono::milliseconds(0);
    return options;
  }

  // True once at least `count` health events arrived, false after `timeout`.
  bool WaitForEvents(size_t count, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return events_.size() >= count; });
  }

  std::vector<HealthEvent> events() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  std::vector<std::string> logs() const {
    std::lock_guard<std::mutex> lock(mu_);
    return logs_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<HealthEvent> events_;
  std::vector<std::string> logs_;
};

}  // namespace cohort::gpu::testing
