#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/status_payloads.h"
#include "grpcpp/support/status.h"

namespace cohort {

enum class Protocol { kTensorflow, kXla, kDistributedRuntime, kCohort };
const char* ProtocolName(Protocol protocol);

// Clients' own servers cut messages at this length; so do we, counted as sent (gRPC sends a
// byte outside printable ASCII as three), so that the status fits the client's metadata limit
// (8 KiB by default) with its payloads, and the client sees the real error.
inline constexpr size_t kMaxErrorMessageBytes = 3072;
inline constexpr size_t kMaxPayloadBarrierIdBytes = 1024;

// `text` cut at whole UTF-8 sequences to at most kMaxErrorMessageBytes as sent.
std::string CutMessage(absl::string_view text);

// The one place where a core status becomes a gRPC status. Every error is marked as the
// service's own (a CoordinationServiceError payload, in the protocol's message type), and
// barrier errors carry their BarrierError.
grpc::Status ToGrpcStatus(const absl::Status& status, Protocol protocol);

// The inverse, for a status the coordinator answered in the tensorflow protocol (what a
// forwarding proxy reads): its payloads become the core's again, so that the adapters
// translate it to the proxy's clients like a status of the local core. A status without a
// CoordinationServiceError payload did not come from the service (a transport failure).
absl::Status CoreStatusFromGrpc(const grpc::Status& status);

// A request of the xla protocol named another service incarnation than ours.
absl::Status ServiceMismatchError(uint64_t ours, uint64_t theirs);

}  // namespace cohort
