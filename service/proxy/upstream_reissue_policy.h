#pragma once
// The reissue policy of the sidecar proxy: what becomes of a call it forwards to the
// coordinator, when the call is submitted and each time an attempt of it ends. It goes out
// (again), is held until the coordinator is back, or ends, and with which status. Pure
// functions of the link's state, the call's options and the attempt's outcome: they keep
// nothing and take no lock. UpstreamConnection reads the link, asks them and acts on the answer
// in one step under its lock, so that no change of the link comes in between.

#include "absl/status/status.h"
#include "service/proxy/upstream_call_table.h"
#include "service/proxy/upstream_link.h"

namespace cohort {

enum class CallFate {
  kSend,            // it goes out now
  kHold,            // it waits for the coordinator to come back
  kEndLinkFailure,  // it ends with the link's failure (the link failed or was stopped)
  kEndUnreachable,  // it ends with the link's UnreachableError (it may not be held)
  kEndAsAnswered,   // it ends with what its attempt ended with
};

// A call submitted while the link is `link`. Fail-fast calls are not held; calls that bypass
// the link (re-registration, how the link comes back up) go out while it is down.
CallFate FateOfNewCall(UpstreamLink::State link, const UpstreamSendOptions& options);

// An attempt that ended with `status` (the core's status), the link being `link`.
struct AttemptFate {
  CallFate call = CallFate::kEndAsAnswered;
  // It failed for want of the coordinator: a connected link goes down (UpstreamLink::MarkDown).
  bool link_lost = false;
};
AttemptFate FateAfterAttempt(UpstreamLink::State link, const UpstreamSendOptions& options,
                             const absl::Status& status);

// An attempt that went on a park stream, before FateAfterAttempt: whether it is sent again
// at once, uncounted, for it never reached the service as a call of its own.
enum class ParkedAttemptFate {
  kAnswered,  // no: FateAfterAttempt decides
  // The coordinator refused the stream: this call and every later one go unary until the
  // next reconnection tries again (UpstreamLink::ParkRefused).
  kStreamRefused,
  // The stream was replaced while the coordinator stayed reachable: sent again on the
  // current one, no outage.
  kStreamReplaced,
};
struct ParkedAttempt {
  bool stream_refused = false;  // the stream it went on was refused (UpstreamPark::refused)
  bool stream_current = false;  // that stream is still the link's park stream
};
ParkedAttemptFate FateOfParkedAttempt(const ParkedAttempt& attempt, bool link_connected,
                                      const absl::Status& status);

}  // namespace cohort
