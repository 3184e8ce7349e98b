// Compiled against NVIDIA's own nvml.h (where it is available) to prove that
// sidecar/gpu/nvml_abi.h declares the same ABI: struct sizes and member offsets, enum values,
// constants, and each entry point's signature. It has no main; compiling is the check.
// check_nvml_abi.sh runs it; the test suite runs that script when it finds nvml.h.

// Declares the older entry points too (nvmlInit, nvmlEventSetWait, ...), which NvmlLibrary
// falls back to on older drivers.
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#include <cstddef>
#include <type_traits>

#include "sidecar/gpu/nvml_abi.h"

namespace cohort::gpu::nvml {
namespace {

#define SAME_SIZE(ours, theirs) static_assert(sizeof(ours) == sizeof(theirs), #ours " size")
#define SAME_OFFSET(ours, our_member, theirs, their_member)                   \
  static_assert(offsetof(ours, our_member) == offsetof(theirs, their_member), \
                #ours "." #our_member " offset")
#define SAME_VALUE(ours, theirs) \
  static_assert(static_cast<long long>(ours) == static_cast<long long>(theirs), #ours)

// Structs.
SAME_SIZE(PciInfo, nvmlPciInfo_t);
SAME_OFFSET(PciInfo, bus_id_legacy, nvmlPciInfo_t, busIdLegacy);
SAME_OFFSET(PciInfo, domain, nvmlPciInfo_t, domain);
SAME_OFFSET(PciInfo, bus, nvmlPciInfo_t, bus);
SAME_OFFSET(PciInfo, device, nvmlPciInfo_t, device);
SAME_OFFSET(PciInfo, pci_device_id, nvmlPciInfo_t, pciDeviceId);
SAME_OFFSET(PciInfo, pci_subsystem_id, nvmlPciInfo_t, pciSubSystemId);
SAME_OFFSET(PciInfo, bus_id, nvmlPciInfo_t, busId);
SAME_SIZE(Memory, nvmlMemory_t);
SAME_OFFSET(Memory, total, nvmlMemory_t, total);
SAME_OFFSET(Memory, free, nvmlMemory_t, free);
SAME_OFFSET(Memory, used, nvmlMemory_t, used);
SAME_SIZE(MemoryV2, nvmlMemory_v2_t);
SAME_OFFSET(MemoryV2, version, nvmlMemory_v2_t, version);
SAME_OFFSET(MemoryV2, total, nvmlMemory_v2_t, total);
SAME_OFFSET(MemoryV2, reserved, nvmlMemory_v2_t, reserved);
SAME_OFFSET(MemoryV2, free, nvmlMemory_v2_t, free);
SAME_OFFSET(MemoryV2, used, nvmlMemory_v2_t, used);
SAME_SIZE(Utilization, nvmlUtilization_t);
SAME_OFFSET(Utilization, gpu, nvmlUtilization_t, gpu);
SAME_OFFSET(Utilization, memory, nvmlUtilization_t, memory);
SAME_SIZE(EventData, nvmlEventData_t);
SAME_OFFSET(EventData, device, nvmlEventData_t, device);
SAME_OFFSET(EventData, event_type, nvmlEventData_t, eventType);
SAME_OFFSET(EventData, event_data, nvmlEventData_t, eventData);
SAME_OFFSET(EventData, gpu_instance_id, nvmlEventData_t, gpuInstanceId);
SAME_OFFSET(EventData, compute_instance_id, nvmlEventData_t, computeInstanceId);
SAME_SIZE(Value, nvmlValue_t);
SAME_OFFSET(Value, as_double, nvmlValue_t, dVal);
SAME_OFFSET(Value, as_int, nvmlValue_t, siVal);
SAME_OFFSET(Value, as_uint, nvmlValue_t, uiVal);
SAME_OFFSET(Value, as_ulong, nvmlValue_t, ulVal);
SAME_OFFSET(Value, as_ulonglong, nvmlValue_t, ullVal);
SAME_OFFSET(Value, as_longlong, nvmlValue_t, sllVal);
SAME_SIZE(FieldValue, nvmlFieldValue_t);
SAME_OFFSET(FieldValue, field_id, nvmlFieldValue_t, fieldId);
SAME_OFFSET(FieldValue, scope_id, nvmlFieldValue_t, scopeId);
SAME_OFFSET(FieldValue, timestamp_us, nvmlFieldValue_t, timestamp);
SAME_OFFSET(FieldValue, latency_us, nvmlFieldValue_t, latencyUsec);
SAME_OFFSET(FieldValue, value_type, nvmlFieldValue_t, valueType);
SAME_OFFSET(FieldValue, result, nvmlFieldValue_t, nvmlReturn);
SAME_OFFSET(FieldValue, value, nvmlFieldValue_t, value);

// Enums: every value we name, and the size the ABI passes.
SAME_SIZE(Return, nvmlReturn_t);
SAME_VALUE(kSuccess, NVML_SUCCESS);
SAME_VALUE(kErrorUninitialized, NVML_ERROR_UNINITIALIZED);
SAME_VALUE(kErrorInvalidArgument, NVML_ERROR_INVALID_ARGUMENT);
SAME_VALUE(kErrorNotSupported, NVML_ERROR_NOT_SUPPORTED);
SAME_VALUE(kErrorNoPermission, NVML_ERROR_NO_PERMISSION);
SAME_VALUE(kErrorAlreadyInitialized, NVML_ERROR_ALREADY_INITIALIZED);
SAME_VALUE(kErrorNotFound, NVML_ERROR_NOT_FOUND);
SAME_VALUE(kErrorInsufficientSize, NVML_ERROR_INSUFFICIENT_SIZE);
SAME_VALUE(kErrorInsufficientPower, NVML_ERROR_INSUFFICIENT_POWER);
SAME_VALUE(kErrorDriverNotLoaded, NVML_ERROR_DRIVER_NOT_LOADED);
SAME_VALUE(kErrorTimeout, NVML_ERROR_TIMEOUT);
SAME_VALUE(kErrorIrqIssue, NVML_ERROR_IRQ_ISSUE);
SAME_VALUE(kErrorLibraryNotFound, NVML_ERROR_LIBRARY_NOT_FOUND);
SAME_VALUE(kErrorFunctionNotFound, NVML_ERROR_FUNCTION_NOT_FOUND);
SAME_VALUE(kErrorCorruptedInforom, NVML_ERROR_CORRUPTED_INFOROM);
SAME_VALUE(kErrorGpuIsLost, NVML_ERROR_GPU_IS_LOST);
SAME_VALUE(kErrorResetRequired, NVML_ERROR_RESET_REQUIRED);
SAME_VALUE(kErrorOperatingSystem, NVML_ERROR_OPERATING_SYSTEM);
SAME_VALUE(kErrorLibRmVersionMismatch, NVML_ERROR_LIB_RM_VERSION_MISMATCH);
SAME_VALUE(kErrorInUse, NVML_ERROR_IN_USE);
SAME_VALUE(kErrorMemory, NVML_ERROR_MEMORY);
SAME_VALUE(kErrorNoData, NVML_ERROR_NO_DATA);
SAME_VALUE(kErrorArgumentVersionMismatch, NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
SAME_VALUE(kErrorUnknown, NVML_ERROR_UNKNOWN);
SAME_SIZE(EnableState, nvmlEnableState_t);
SAME_VALUE(kFeatureDisabled, NVML_FEATURE_DISABLED);
SAME_VALUE(kFeatureEnabled, NVML_FEATURE_ENABLED);
SAME_SIZE(TopologyLevel, nvmlGpuTopologyLevel_t);
SAME_VALUE(kTopologyInternal, NVML_TOPOLOGY_INTERNAL);
SAME_VALUE(kTopologySingle, NVML_TOPOLOGY_SINGLE);
SAME_VALUE(kTopologyMultiple, NVML_TOPOLOGY_MULTIPLE);
SAME_VALUE(kTopologyHostBridge, NVML_TOPOLOGY_HOSTBRIDGE);
SAME_VALUE(kTopologyNode, NVML_TOPOLOGY_NODE);
SAME_VALUE(kTopologySystem, NVML_TOPOLOGY_SYSTEM);
SAME_SIZE(NvLinkDeviceType, nvmlIntNvLinkDeviceType_t);
SAME_VALUE(kNvLinkDeviceGpu, NVML_NVLINK_DEVICE_TYPE_GPU);
SAME_VALUE(kNvLinkDeviceIbmNpu, NVML_NVLINK_DEVICE_TYPE_IBMNPU);
SAME_VALUE(kNvLinkDeviceSwitch, NVML_NVLINK_DEVICE_TYPE_SWITCH);
SAME_VALUE(kNvLinkDeviceUnknown, NVML_NVLINK_DEVICE_TYPE_UNKNOWN);
SAME_SIZE(TemperatureSensor, nvmlTemperatureSensors_t);
SAME_VALUE(kTemperatureGpu, NVML_TEMPERATURE_GPU);
SAME_SIZE(ClockType, nvmlClockType_t);
SAME_VALUE(kClockGraphics, NVML_CLOCK_GRAPHICS);
SAME_VALUE(kClockSm, NVML_CLOCK_SM);
SAME_VALUE(kClockMemory, NVML_CLOCK_MEM);
SAME_VALUE(kClockVideo, NVML_CLOCK_VIDEO);
SAME_SIZE(MemoryErrorType, nvmlMemoryErrorType_t);
SAME_VALUE(kMemoryErrorCorrected, NVML_MEMORY_ERROR_TYPE_CORRECTED);
SAME_VALUE(kMemoryErrorUncorrected, NVML_MEMORY_ERROR_TYPE_UNCORRECTED);
SAME_SIZE(EccCounterType, nvmlEccCounterType_t);
SAME_VALUE(kEccVolatile, NVML_VOLATILE_ECC);
SAME_VALUE(kEccAggregate, NVML_AGGREGATE_ECC);
SAME_SIZE(ValueType, nvmlValueType_t);
SAME_VALUE(kValueTypeDouble, NVML_VALUE_TYPE_DOUBLE);
SAME_VALUE(kValueTypeUnsignedInt, NVML_VALUE_TYPE_UNSIGNED_INT);
SAME_VALUE(kValueTypeUnsignedLong, NVML_VALUE_TYPE_UNSIGNED_LONG);
SAME_VALUE(kValueTypeUnsignedLongLong, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG);
SAME_VALUE(kValueTypeSignedLongLong, NVML_VALUE_TYPE_SIGNED_LONG_LONG);
SAME_VALUE(kValueTypeSignedInt, NVML_VALUE_TYPE_SIGNED_INT);
// The recovery action, and the unsigned short value that came before it, are only in newer
// headers; older ones have no NVML_FI_DEV_GET_GPU_RECOVERY_ACTION.
#ifdef NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
SAME_VALUE(kValueTypeUnsignedShort, NVML_VALUE_TYPE_UNSIGNED_SHORT);
SAME_OFFSET(Value, as_ushort, nvmlValue_t, usVal);
SAME_VALUE(kFieldIdGpuRecoveryAction, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION);
SAME_SIZE(GpuRecoveryAction, nvmlDeviceGpuRecoveryAction_t);
SAME_VALUE(kRecoveryActionNone, NVML_GPU_RECOVERY_ACTION_NONE);
SAME_VALUE(kRecoveryActionGpuReset, NVML_GPU_RECOVERY_ACTION_GPU_RESET);
SAME_VALUE(kRecoveryActionNodeReboot, NVML_GPU_RECOVERY_ACTION_NODE_REBOOT);
SAME_VALUE(kRecoveryActionDrainP2p, NVML_GPU_RECOVERY_ACTION_DRAIN_P2P);
SAME_VALUE(kRecoveryActionDrainAndReset, NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET);
#endif

// GPM, which headers older than NVML 11.8 lack. Only the `metrics` array's length differs
// between releases (NVML_GPM_METRIC_MAX grows); ours must be at least the header's.
#ifdef NVML_GPM_METRICS_GET_VERSION
SAME_VALUE(kGpmMetricSmUtil, NVML_GPM_METRIC_SM_UTIL);
SAME_VALUE(kGpmMetricsGetVersion, NVML_GPM_METRICS_GET_VERSION);
SAME_VALUE(kGpmSupportVersion, NVML_GPM_SUPPORT_VERSION);
SAME_SIZE(GpmMetric, nvmlGpmMetric_t);
SAME_OFFSET(GpmMetric, metric_id, nvmlGpmMetric_t, metricId);
SAME_OFFSET(GpmMetric, result, nvmlGpmMetric_t, nvmlReturn);
SAME_OFFSET(GpmMetric, value, nvmlGpmMetric_t, value);
SAME_OFFSET(GpmMetric, info, nvmlGpmMetric_t, metricInfo);
SAME_OFFSET(GpmMetric, info.short_name, nvmlGpmMetric_t, metricInfo.shortName);
SAME_OFFSET(GpmMetric, info.long_name, nvmlGpmMetric_t, metricInfo.longName);
SAME_OFFSET(GpmMetric, info.unit, nvmlGpmMetric_t, metricInfo.unit);
static_assert(std::is_same_v<decltype(GpmMetric::metric_id), decltype(nvmlGpmMetric_t::metricId)>,
              "GpmMetric.metric_id type");
static_assert(std::is_same_v<decltype(GpmMetric::value), decltype(nvmlGpmMetric_t::value)>,
              "GpmMetric.value type");
SAME_OFFSET(GpmMetricsGet, version, nvmlGpmMetricsGet_t, version);
SAME_OFFSET(GpmMetricsGet, metric_count, nvmlGpmMetricsGet_t, numMetrics);
SAME_OFFSET(GpmMetricsGet, sample1, nvmlGpmMetricsGet_t, sample1);
SAME_OFFSET(GpmMetricsGet, sample2, nvmlGpmMetricsGet_t, sample2);
SAME_OFFSET(GpmMetricsGet, metrics, nvmlGpmMetricsGet_t, metrics);
static_assert(kGpmMetricCapacity >= NVML_GPM_METRIC_MAX,
              "kGpmMetricCapacity is shorter than this nvml.h's NVML_GPM_METRIC_MAX: raise it");
static_assert(sizeof(GpmMetricsGet) >= sizeof(nvmlGpmMetricsGet_t), "GpmMetricsGet size");
SAME_SIZE(GpmSupport, nvmlGpmSupport_t);
SAME_OFFSET(GpmSupport, version, nvmlGpmSupport_t, version);
SAME_OFFSET(GpmSupport, is_supported_device, nvmlGpmSupport_t, isSupportedDevice);
#endif

// Constants.
SAME_VALUE(kMigDisabled, NVML_DEVICE_MIG_DISABLE);
SAME_VALUE(kMigEnabled, NVML_DEVICE_MIG_ENABLE);
SAME_VALUE(kEventTypeSingleBitEccError, nvmlEventTypeSingleBitEccError);
SAME_VALUE(kEventTypeDoubleBitEccError, nvmlEventTypeDoubleBitEccError);
SAME_VALUE(kEventTypeXidCriticalError, nvmlEventTypeXidCriticalError);
SAME_VALUE(kUuidBufferSize, NVML_DEVICE_UUID_V2_BUFFER_SIZE);
SAME_VALUE(kNameBufferSize, NVML_DEVICE_NAME_V2_BUFFER_SIZE);
SAME_VALUE(kDriverVersionBufferSize, NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE);
SAME_VALUE(kNvmlVersionBufferSize, NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE);
SAME_VALUE(kPciBusIdBufferSize, NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE);
SAME_VALUE(kPciBusIdLegacyBufferSize, NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE);
SAME_VALUE(kMemoryV2Version, nvmlMemory_v2);
SAME_VALUE(kAffinityScopeNode, NVML_AFFINITY_SCOPE_NODE);
static_assert(std::is_same_v<AffinityScope, nvmlAffinityScope_t>, "AffinityScope");

// Signatures. Real<T> is the nvml.h type that stands where our type T stands, so a function
// pointer type of ours must become exactly the type of NVIDIA's function.
template <typename T>
struct Real {
  using type = T;
};
template <typename T>
struct Real<T*> {
  using type = typename Real<T>::type*;
};
template <typename R, typename... Args>
struct Real<R (*)(Args...)> {
  using type = typename Real<R>::type (*)(typename Real<Args>::type...);
};
#define MAPS_TO(ours, theirs) \
  template <>                 \
  struct Real<ours> {         \
    using type = theirs;      \
  }
MAPS_TO(Return, nvmlReturn_t);
MAPS_TO(EnableState, nvmlEnableState_t);
MAPS_TO(TopologyLevel, nvmlGpuTopologyLevel_t);
MAPS_TO(NvLinkDeviceType, nvmlIntNvLinkDeviceType_t);
MAPS_TO(TemperatureSensor, nvmlTemperatureSensors_t);
MAPS_TO(ClockType, nvmlClockType_t);
MAPS_TO(MemoryErrorType, nvmlMemoryErrorType_t);
MAPS_TO(EccCounterType, nvmlEccCounterType_t);
MAPS_TO(Device, nvmlDevice_t);
MAPS_TO(EventSet, nvmlEventSet_t);
MAPS_TO(PciInfo, nvmlPciInfo_t);
MAPS_TO(Memory, nvmlMemory_t);
MAPS_TO(MemoryV2, nvmlMemory_v2_t);
MAPS_TO(Utilization, nvmlUtilization_t);
MAPS_TO(EventData, nvmlEventData_t);
MAPS_TO(FieldValue, nvmlFieldValue_t);
#ifdef NVML_GPM_METRICS_GET_VERSION
MAPS_TO(GpmSample, nvmlGpmSample_t);
MAPS_TO(GpmSupport, nvmlGpmSupport_t);
MAPS_TO(GpmMetricsGet, nvmlGpmMetricsGet_t);
#endif

#define SAME_SIGNATURE(fn_type, function) \
  static_assert(std::is_same_v<Real<fn_type>::type, decltype(&::function)>, #function)

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // nvmlDeviceGetTemperature
SAME_SIGNATURE(InitFn, nvmlInit_v2);
SAME_SIGNATURE(InitFn, nvmlInit);
SAME_SIGNATURE(ShutdownFn, nvmlShutdown);
SAME_SIGNATURE(ErrorStringFn, nvmlErrorString);
SAME_SIGNATURE(SystemGetStringFn, nvmlSystemGetDriverVersion);
SAME_SIGNATURE(SystemGetStringFn, nvmlSystemGetNVMLVersion);
SAME_SIGNATURE(SystemGetCudaDriverVersionFn, nvmlSystemGetCudaDriverVersion_v2);
SAME_SIGNATURE(SystemGetCudaDriverVersionFn, nvmlSystemGetCudaDriverVersion);
SAME_SIGNATURE(DeviceGetCountFn, nvmlDeviceGetCount_v2);
SAME_SIGNATURE(DeviceGetCountFn, nvmlDeviceGetCount);
SAME_SIGNATURE(DeviceGetHandleByIndexFn, nvmlDeviceGetHandleByIndex_v2);
SAME_SIGNATURE(DeviceGetHandleByIndexFn, nvmlDeviceGetHandleByIndex);
SAME_SIGNATURE(DeviceGetStringFn, nvmlDeviceGetUUID);
SAME_SIGNATURE(DeviceGetStringFn, nvmlDeviceGetName);
SAME_SIGNATURE(DeviceGetPciInfoFn, nvmlDeviceGetPciInfo_v3);
SAME_SIGNATURE(DeviceGetPciInfoFn, nvmlDeviceGetPciInfo_v2);
SAME_SIGNATURE(DeviceGetMemoryInfoFn, nvmlDeviceGetMemoryInfo);
SAME_SIGNATURE(DeviceGetMemoryInfoV2Fn, nvmlDeviceGetMemoryInfo_v2);
SAME_SIGNATURE(DeviceGetCudaComputeCapabilityFn, nvmlDeviceGetCudaComputeCapability);
SAME_SIGNATURE(DeviceGetUintFn, nvmlDeviceGetNumaNodeId);
SAME_SIGNATURE(DeviceGetMemoryAffinityFn, nvmlDeviceGetMemoryAffinity);
SAME_SIGNATURE(DeviceGetModePairFn, nvmlDeviceGetMigMode);
SAME_SIGNATURE(DeviceGetEnableStatePairFn, nvmlDeviceGetEccMode);
SAME_SIGNATURE(DeviceGetTopologyCommonAncestorFn, nvmlDeviceGetTopologyCommonAncestor);
SAME_SIGNATURE(DeviceGetNvLinkStateFn, nvmlDeviceGetNvLinkState);
SAME_SIGNATURE(DeviceGetNvLinkRemotePciInfoFn, nvmlDeviceGetNvLinkRemotePciInfo_v2);
SAME_SIGNATURE(DeviceGetNvLinkRemoteDeviceTypeFn, nvmlDeviceGetNvLinkRemoteDeviceType);
SAME_SIGNATURE(DeviceGetUtilizationRatesFn, nvmlDeviceGetUtilizationRates);
SAME_SIGNATURE(DeviceGetTemperatureFn, nvmlDeviceGetTemperature);
SAME_SIGNATURE(DeviceGetUintFn, nvmlDeviceGetPowerUsage);
SAME_SIGNATURE(DeviceGetUintFn, nvmlDeviceGetEnforcedPowerLimit);
SAME_SIGNATURE(DeviceGetUlonglongFn, nvmlDeviceGetTotalEnergyConsumption);
SAME_SIGNATURE(DeviceGetClockInfoFn, nvmlDeviceGetClockInfo);
SAME_SIGNATURE(DeviceGetTotalEccErrorsFn, nvmlDeviceGetTotalEccErrors);
SAME_SIGNATURE(DeviceGetRemappedRowsFn, nvmlDeviceGetRemappedRows);
SAME_SIGNATURE(DeviceGetUintFn, nvmlDeviceGetPcieReplayCounter);
SAME_SIGNATURE(DeviceGetFieldValuesFn, nvmlDeviceGetFieldValues);
SAME_SIGNATURE(EventSetCreateFn, nvmlEventSetCreate);
SAME_SIGNATURE(EventSetFreeFn, nvmlEventSetFree);
SAME_SIGNATURE(DeviceGetUlonglongFn, nvmlDeviceGetSupportedEventTypes);
SAME_SIGNATURE(DeviceRegisterEventsFn, nvmlDeviceRegisterEvents);
SAME_SIGNATURE(EventSetWaitFn, nvmlEventSetWait_v2);
SAME_SIGNATURE(EventSetWaitFn, nvmlEventSetWait);
#ifdef NVML_GPM_METRICS_GET_VERSION
SAME_SIGNATURE(GpmQueryDeviceSupportFn, nvmlGpmQueryDeviceSupport);
SAME_SIGNATURE(GpmSampleAllocFn, nvmlGpmSampleAlloc);
SAME_SIGNATURE(GpmSampleFreeFn, nvmlGpmSampleFree);
SAME_SIGNATURE(GpmSampleGetFn, nvmlGpmSampleGet);
SAME_SIGNATURE(GpmMetricsGetFn, nvmlGpmMetricsGet);
#endif
#pragma GCC diagnostic pop

}  // namespace
}  // namespace cohort::gpu::nvml
