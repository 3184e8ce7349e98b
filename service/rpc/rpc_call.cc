#include "service/rpc/rpc_call.h"

namespace cohort {

RpcMetrics::RpcMetrics(MetricsRegistry& registry)
    : requests_(registry.AddCounter("cohort_coordinator_rpcs_total",
                                    "RPCs answered, by protocol, method and gRPC status code.",
                                    {"protocol", "method", "code"})),
      latency_(registry.AddHistogram(
          "cohort_coordinator_rpc_duration_seconds",
          "Time from a request's arrival to its answer, parked time included.",
          {"protocol", "method"}, ExponentialBuckets(0.0001, 4, 12))) {}

void RpcMetrics::Record(Protocol protocol, const char* method, absl::StatusCode code,
                        absl::Duration latency) {
  requests_.WithLabels({ProtocolName(protocol), method, absl::StatusCodeToString(code)})
      .Increment();
  latency_.WithLabels({ProtocolName(protocol), method}).Observe(absl::ToDoubleSeconds(latency));
}

}  // namespace cohort
