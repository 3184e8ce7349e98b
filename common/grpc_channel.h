#pragma once
// Letting go of a gRPC channel safely.
//
// A call's ClientContext holds a reference to its channel, and a callback's captures (which
// often hold the context) are destroyed on gRPC's own thread after the callback returns. When
// that is the channel's last reference, gRPC 1.51 destroys, on that thread, the completion
// queue the thread is still polling: a use after free (ThreadSanitizer found it in the agent
// and in the sidecar's proxy, at shutdown). So the owner of a channel waits, when it goes,
// until every call has let go of it, and drops the last reference itself.

#include <memory>

#include "absl/time/time.h"
#include "grpcpp/channel.h"

namespace cohort {

// Waits until `*channel` is its channel's only reference (every call's context and every
// stub made from it gone), then resets it. The caller must first end its calls and destroy
// its own stubs. Waits at most `patience`; past that it logs a warning and lets go anyway.
void ReleaseChannel(std::shared_ptr<grpc::Channel>* channel,
                    absl::Duration patience = absl::Seconds(10));

}  // namespace cohort
