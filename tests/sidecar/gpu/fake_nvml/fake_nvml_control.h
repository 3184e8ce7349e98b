#pragma once

// Extra C functions the fake libnvidia-ml.so.1 exports so tests can change the node while it
// runs. Tests find them with dlsym on the fake's handle (dlopen with RTLD_NOLOAD returns the
// copy the module under test loaded), so the fake's state is the one the module sees.
//
// Each returns 0, or -1 when `index` names no configured GPU (or NVML is not initialised).

extern "C" {

// Queues a critical-XID event for every event set the GPU is registered in for XIDs.
int fakeNvmlInjectXid(unsigned int index, unsigned long long xid);
// Adds `count` to the GPU's volatile and aggregate double-bit ECC counters and queues a
// double-bit ECC event for every event set registered for it.
int fakeNvmlInjectDoubleBitEcc(unsigned int index, unsigned long long count);
// From now on every call about the GPU answers NVML_ERROR_GPU_IS_LOST, and the next wait on
// each event set holding the GPU answers it once.
int fakeNvmlSetGpuLost(unsigned int index);
// From now on the GPU's field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION answers `action` (an
// nvmlDeviceGpuRecoveryAction_t), even if its config said the driver lacks the field.
int fakeNvmlSetRecoveryAction(unsigned int index, unsigned int action);
// From now on GPM reports `activity` (0..1) as the GPU's SM utilisation; negative: the GPU
// has no GPM from now on (its GPM calls answer NVML_ERROR_NOT_SUPPORTED). The GPU module asks
// whether a GPU has GPM once, when its monitor starts: one that started while the GPU had none
// reads none after this either.
int fakeNvmlSetSmActivity(unsigned int index, double activity);
// How many nvmlInit calls are not yet matched by nvmlShutdown.
int fakeNvmlInitCount(void);
// How many event sets exist (created and not freed).
int fakeNvmlEventSetCount(void);
// How many GPM sample buffers exist (allocated and not freed).
int fakeNvmlGpmSampleCount(void);
}

using FakeNvmlInjectXidFn = int (*)(unsigned int, unsigned long long);
using FakeNvmlInjectDoubleBitEccFn = int (*)(unsigned int, unsigned long long);
using FakeNvmlSetGpuLostFn = int (*)(unsigned int);
using FakeNvmlSetRecoveryActionFn = int (*)(unsigned int, unsigned int);
using FakeNvmlSetSmActivityFn = int (*)(unsigned int, double);
using FakeNvmlCountFn = int (*)();
