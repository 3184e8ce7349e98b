#pragma once

// The part of NVML's C ABI that cohort uses, declared here so that nothing links against
// NVIDIA's library or needs its header at build time. Every value and layout below is a
// public fact from NVML's API reference; tests/sidecar/gpu/nvml_abi_check.cc compares them
// with the real nvml.h whenever that header is available.
//
// Only the layout matters to the ABI, so the names follow cohort's style rather than NVML's.

#include <cstdint>

namespace cohort::gpu::nvml {

// nvmlReturn_t.
enum Return : int {
  kSuccess = 0,
  kErrorUninitialized = 1,
  kErrorInvalidArgument = 2,
  kErrorNotSupported = 3,
  kErrorNoPermission = 4,
  kErrorAlreadyInitialized = 5,
  kErrorNotFound = 6,
  kErrorInsufficientSize = 7,
  kErrorInsufficientPower = 8,
  kErrorDriverNotLoaded = 9,
  kErrorTimeout = 10,
  kErrorIrqIssue = 11,
  kErrorLibraryNotFound = 12,
  kErrorFunctionNotFound = 13,
  kErrorCorruptedInforom = 14,
  kErrorGpuIsLost = 15,
  kErrorResetRequired = 16,
  kErrorOperatingSystem = 17,
  kErrorLibRmVersionMismatch = 18,
  kErrorInUse = 19,
  kErrorMemory = 20,
  kErrorNoData = 21,
  kErrorArgumentVersionMismatch = 25,  // a versioned struct's `version` is not one NVML knows
  kErrorUnknown = 999,
};

// nvmlEnableState_t.
enum EnableState : int {
  kFeatureDisabled = 0,
  kFeatureEnabled = 1,
};

// nvmlGpuTopologyLevel_t: the closest common ancestor of two GPUs in the PCIe tree.
enum TopologyLevel : int {
  kTopologyInternal = 0,     // the same board (multi-GPU cards)
  kTopologySingle = 10,      // one PCIe switch
  kTopologyMultiple = 20,    // several PCIe switches, no host bridge
  kTopologyHostBridge = 30,  // the same host bridge
  kTopologyNode = 40,        // the same NUMA node, different host bridges
  kTopologySystem = 50,      // across NUMA nodes (the SMP interconnect)
};

// nvmlIntNvLinkDeviceType_t: what the far end of an NVLink is.
enum NvLinkDeviceType : int {
  kNvLinkDeviceGpu = 0x00,
  kNvLinkDeviceIbmNpu = 0x01,
  kNvLinkDeviceSwitch = 0x02,
  kNvLinkDeviceUnknown = 0xFF,
};

// nvmlTemperatureSensors_t.
enum TemperatureSensor : int {
  kTemperatureGpu = 0,
};

// nvmlClockType_t.
enum ClockType : int {
  kClockGraphics = 0,
  kClockSm = 1,
  kClockMemory = 2,
  kClockVideo = 3,
};

// nvmlMemoryErrorType_t. "Corrected" is what older tools call single-bit ECC errors and
// "uncorrected" double-bit ones.
enum MemoryErrorType : int {
  kMemoryErrorCorrected = 0,
  kMemoryErrorUncorrected = 1,
};

// nvmlEccCounterType_t.
enum EccCounterType : int {
  kEccVolatile = 0,   // since the driver last loaded
  kEccAggregate = 1,  // over the lifetime of the board
};

// nvmlValueType_t: which member of a Value holds what NVML read.
enum ValueType : int {
  kValueTypeDouble = 0,
  kValueTypeUnsignedInt = 1,
  kValueTypeUnsignedLong = 2,
  kValueTypeUnsignedLongLong = 3,
  kValueTypeSignedLongLong = 4,
  kValueTypeSignedInt = 5,
  kValueTypeUnsignedShort = 6,
};

// nvmlDeviceGpuRecoveryAction_t: what the driver says a GPU needs after a fault. Newer drivers
// report values beyond these.
enum GpuRecoveryAction : int {
  kRecoveryActionNone = 0,
  kRecoveryActionGpuReset = 1,
  kRecoveryActionNodeReboot = 2,
  kRecoveryActionDrainP2p = 3,       // drain peer-to-peer traffic, then ask again
  kRecoveryActionDrainAndReset = 4,  // running at reduced capacity: drain, then reset
};

// Field ids of nvmlDeviceGetFieldValues (NVML_FI_*). The GPU's recovery action, a
// GpuRecoveryAction, arrives as an unsigned int; drivers older than the field answer
// kErrorNotSupported for it.
inline constexpr unsigned int kFieldIdGpuRecoveryAction = 230;

// Values nvmlDeviceGetMigMode reports.
inline constexpr unsigned int kMigDisabled = 0;
inline constexpr unsigned int kMigEnabled = 1;

// nvmlAffinityScope_t (a plain unsigned int in NVML) and the scope of one NUMA node.
using AffinityScope = unsigned int;
inline constexpr AffinityScope kAffinityScopeNode = 0;

// Event type bits (nvmlEventType*).
inline constexpr unsigned long long kEventTypeSingleBitEccError = 0x1ULL;
inline constexpr unsigned long long kEventTypeDoubleBitEccError = 0x2ULL;
inline constexpr unsigned long long kEventTypeXidCriticalError = 0x8ULL;

// Buffer sizes the API documents as large enough for each string.
inline constexpr unsigned int kUuidBufferSize = 96;
inline constexpr unsigned int kNameBufferSize = 96;
inline constexpr unsigned int kDriverVersionBufferSize = 80;
inline constexpr unsigned int kNvmlVersionBufferSize = 80;
inline constexpr unsigned int kPciBusIdBufferSize = 32;
inline constexpr unsigned int kPciBusIdLegacyBufferSize = 16;

// Opaque handles (nvmlDevice_t, nvmlEventSet_t, nvmlGpmSample_t).
struct DeviceOpaque;
using Device = DeviceOpaque*;
struct EventSetOpaque;
using EventSet = EventSetOpaque*;
struct GpmSampleOpaque;
using GpmSample = GpmSampleOpaque*;  // a buffer of GPM counters, from nvmlGpmSampleAlloc

// nvmlPciInfo_t as filled by nvmlDeviceGetPciInfo_v2/_v3 and nvmlDeviceGetNvLinkRemotePciInfo_v2.
struct PciInfo {
  char bus_id_legacy[kPciBusIdLegacyBufferSize];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;  // device id in the high 16 bits, vendor id in the low
  unsigned int pci_subsystem_id;
  char bus_id[kPciBusIdBufferSize];  // "00000000:18:00.0"
};

// nvmlMemory_t.
struct Memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;  // includes memory the driver reserves
};

// nvmlMemory_v2_t. `version` must be kMemoryV2Version.
struct MemoryV2 {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;  // excludes the reserved memory
};
// NVML versions a struct by its size in the low 24 bits and the version number above them.
inline constexpr unsigned int kMemoryV2Version =
    static_cast<unsigned int>(sizeof(MemoryV2)) | (2u << 24);

// nvmlUtilization_t: percentages over the driver's last sample period.
struct Utilization {
  unsigned int gpu;
  unsigned int memory;
};

// nvmlEventData_t.
struct EventData {
  Device device;
  unsigned long long event_type;
  unsigned long long event_data;  // the XID for kEventTypeXidCriticalError (999: unknown XID)
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

// nvmlValue_t.
union Value {
  double as_double;
  int as_int;
  unsigned int as_uint;
  unsigned long as_ulong;
  unsigned long long as_ulonglong;
  long long as_longlong;
  unsigned short as_ushort;
};

// nvmlFieldValue_t: one field asked of nvmlDeviceGetFieldValues. The caller sets field_id and
// scope_id; NVML fills in the rest, and `value` means something only when `result` is
// kSuccess.
struct FieldValue {
  unsigned int field_id;
  unsigned int scope_id;   // 0, except for fields about one link, one lane, ...
  long long timestamp_us;  // when NVML read the value, in microseconds since 1970
  long long latency_us;    // how long the read took inside NVML
  ValueType value_type;
  Return result;  // whether this field could be read
  Value value;
};

// GPU performance monitoring (GPM; Hopper and later, drivers from R520 on): counters read into
// sample buffers, and metrics computed from two samples taken at least 100 ms apart.

// nvmlGpmMetricId_t values cohort asks for. SM utilisation is the percentage (0-100) of the
// GPU's streaming multiprocessors that were busy between the two samples.
inline constexpr unsigned int kGpmMetricSmUtil = 2;  // NVML_GPM_METRIC_SM_UTIL

// nvmlGpmMetric_t: one metric asked of nvmlGpmMetricsGet. The caller sets metric_id; `value`
// means something only when `result` is kSuccess.
struct GpmMetric {
  unsigned int metric_id;
  Return result;
  double value;
  struct Info {  // names NVML may fill in; each may be null
    char* short_name;
    char* long_name;
    char* unit;
  } info;
};

// The length of nvmlGpmMetricsGet_t's `metrics` array: NVML_GPM_METRIC_MAX, which grows with
// each release as metrics are added (98 in CUDA 11.8's nvml.h, 477 in 13.5's). cohort asks
// for the first `metric_count` entries only, but makes the array as long as the newest nvml.h
// checked has it (nvml_abi_check.cc asserts it is no shorter than the header's), so that a
// driver up to that release stays inside the struct even if it touches the whole array.
inline constexpr unsigned int kGpmMetricCapacity = 477;

// nvmlGpmMetricsGet_t. `version` must be kGpmMetricsGetVersion; sample1 is the earlier sample.
struct GpmMetricsGet {
  unsigned int version;
  unsigned int metric_count;  // entries of `metrics` to compute
  GpmSample sample1;
  GpmSample sample2;
  GpmMetric metrics[kGpmMetricCapacity];
};
// Unlike MemoryV2's, GPM's struct versions are plain numbers, without the struct's size.
inline constexpr unsigned int kGpmMetricsGetVersion = 1;  // NVML_GPM_METRICS_GET_VERSION

// nvmlGpmSupport_t. `version` must be kGpmSupportVersion.
struct GpmSupport {
  unsigned int version;
  unsigned int is_supported_device;  // nonzero when the GPU has GPM
};
inline constexpr unsigned int kGpmSupportVersion = 1;  // NVML_GPM_SUPPORT_VERSION

// Function pointer types, one per NVML entry point cohort resolves.
using InitFn = Return (*)();
using ShutdownFn = Return (*)();
using ErrorStringFn = const char* (*)(Return result);
using SystemGetStringFn = Return (*)(char* buffer, unsigned int length);
using SystemGetCudaDriverVersionFn = Return (*)(int* version);
using DeviceGetCountFn = Return (*)(unsigned int* count);
using DeviceGetHandleByIndexFn = Return (*)(unsigned int index, Device* device);
using DeviceGetStringFn = Return (*)(Device device, char* buffer, unsigned int length);
using DeviceGetPciInfoFn = Return (*)(Device device, PciInfo* pci);
using DeviceGetMemoryInfoFn = Return (*)(Device device, Memory* memory);
using DeviceGetMemoryInfoV2Fn = Return (*)(Device device, MemoryV2* memory);
using DeviceGetCudaComputeCapabilityFn = Return (*)(Device device, int* major, int* minor);
using DeviceGetUintFn = Return (*)(Device device, unsigned int* value);
using DeviceGetUlonglongFn = Return (*)(Device device, unsigned long long* value);
// `node_set` is a bitmask of NUMA nodes, 64 per unsigned long; `node_set_size` counts longs.
using DeviceGetMemoryAffinityFn = Return (*)(Device device, unsigned int node_set_size,
                                             unsigned long* node_set, AffinityScope scope);
using DeviceGetModePairFn = Return (*)(Device device, unsigned int* current, unsigned int* pending);
using DeviceGetEnableStatePairFn = Return (*)(Device device, EnableState* current,
                                              EnableState* pending);
using DeviceGetTopologyCommonAncestorFn = Return (*)(Device first, Device second,
                                                     TopologyLevel* level);
using DeviceGetNvLinkStateFn = Return (*)(Device device, unsigned int link, EnableState* active);
using DeviceGetNvLinkRemotePciInfoFn = Return (*)(Device device, unsigned int link, PciInfo* pci);
using DeviceGetNvLinkRemoteDeviceTypeFn = Return (*)(Device device, unsigned int link,
                                                     NvLinkDeviceType* type);
using DeviceGetUtilizationRatesFn = Return (*)(Device device, Utilization* utilization);
using DeviceGetTemperatureFn = Return (*)(Device device, TemperatureSensor sensor,
                                          unsigned int* celsius);
using DeviceGetClockInfoFn = Return (*)(Device device, ClockType type, unsigned int* mhz);
using DeviceGetTotalEccErrorsFn = Return (*)(Device device, MemoryErrorType error_type,
                                             EccCounterType counter_type,
                                             unsigned long long* count);
using DeviceGetRemappedRowsFn = Return (*)(Device device, unsigned int* correctable,
                                           unsigned int* uncorrectable, unsigned int* pending,
                                           unsigned int* failure_occurred);
// Reads `count` fields at once; each element's `result` says whether that field was read.
using DeviceGetFieldValuesFn = Return (*)(Device device, int count, FieldValue* values);
using EventSetCreateFn = Return (*)(EventSet* set);
using EventSetFreeFn = Return (*)(EventSet set);
using DeviceRegisterEventsFn = Return (*)(Device device, unsigned long long event_types,
                                          EventSet set);
using EventSetWaitFn = Return (*)(EventSet set, EventData* data, unsigned int timeout_ms);
using GpmQueryDeviceSupportFn = Return (*)(Device device, GpmSupport* support);
using GpmSampleAllocFn = Return (*)(GpmSample* sample);
using GpmSampleFreeFn = Return (*)(GpmSample sample);
using GpmSampleGetFn = Return (*)(Device device, GpmSample sample);
using GpmMetricsGetFn = Return (*)(GpmMetricsGet* metrics);

}  // namespace cohort::gpu::nvml
