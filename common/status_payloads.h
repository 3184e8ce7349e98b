#pragma once

namespace cohort {

// The payload keys of a coordination status: the type URLs under which a coordinator puts
// messages in a status's details (a GrpcPayloadContainer), and under which a client, the TSL
// agent as cohort's, keeps them on its absl::Status. The coordinator (service/rpc/
// status_translation.h) writes them, the agent (agent/grpc_status.h) reads them.
inline constexpr char kCoordinationServiceErrorUrl[] =
    "type.googleapis.com/tensorflow.CoordinationServiceError";
inline constexpr char kBarrierErrorUrl[] = "type.googleapis.com/tensorflow.BarrierError";
inline constexpr char kServiceMismatchErrorUrl[] =
    "type.googleapis.com/tensorflow.ServiceMismatchError";

}  // namespace cohort
