#pragma once
// UpstreamOptions: how the sidecar proxy reaches the coordinator (its address, credentials
// and the job's token) and how long it rides out the coordinator's absence; and the gRPC
// channel they make.

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace cohort {

struct UpstreamOptions {
  std::string address;                                    // the coordinator, HOST:PORT
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // null: insecure
  std::string tls_server_name;  // the name in the coordinator's certificate (empty: its host)
  // The job's token, sent with every call upstream (empty: none). The proxy's own clients
  // (the pod's processes) send none: it attaches it for them.
  std::string auth_token;
  // How long the coordinator may be unreachable before callers get UNAVAILABLE.
  absl::Duration outage_tolerance = absl::Seconds(60);
  // How often an unreachable coordinator is tried.
  absl::Duration probe_interval = absl::Milliseconds(200);
  // Deadline of each heartbeat call forwarded on the tasks' behalf.
  absl::Duration heartbeat_deadline = absl::Seconds(10);
};

// A channel to the coordinator as UpstreamOptions say: credentials, the job's token on every
// call, and settings that find a restarted coordinator again within a second.
std::shared_ptr<grpc::Channel> MakeUpstreamChannel(const UpstreamOptions& options);

}  // namespace cohort
