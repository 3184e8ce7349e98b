// The agent's call state shared by its session and its calls (not part of the public API).
#pragma once

#include "agent/coordination_agent.h"
#include "grpcpp/grpcpp.h"
#include "tensorflow/coordination_service.pb.h"

namespace cohort {

// gRPC callbacks capture their call's state by plain pointer, never by shared_ptr: the
// state holds a ClientContext, which holds a reference to the channel, and a callback's
// captures are destroyed on gRPC's thread after it returns, possibly after the agent let go
// of the channel. Dropping a channel's last reference on gRPC's own thread destroys the
// completion queue that thread is polling (a use after free ThreadSanitizer found, at
// shutdown). The agent owns the state and frees it from its own threads, or, for a get, from
// the callback while the agent still holds the channel.

// One GetKeyValueAsync: its callback runs exactly once, from the gRPC completion.
class CoordinationAgent::PendingGet : public AsyncGet {
 public:
  void Cancel() override { context.TryCancel(); }

  grpc::ClientContext context;
  tensorflow::GetKeyValueRequest request;
  tensorflow::GetKeyValueResponse response;
  ValueCallback done;
};

}  // namespace cohort
