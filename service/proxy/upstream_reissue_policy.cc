// The reissue policy: whether a forwarded call goes out, is held or ends.
#include "service/proxy/upstream_reissue_policy.h"

#include "service/proxy/upstream_messages.h"

namespace cohort {

namespace {

bool ReissueLinkEnded(UpstreamLink::State link) {
  return link == UpstreamLink::State::kFailed || link == UpstreamLink::State::kStopped;
}

}  // namespace

CallFate FateOfNewCall(UpstreamLink::State link, const UpstreamSendOptions& options) {
  if (ReissueLinkEnded(link)) return CallFate::kEndLinkFailure;
  if (link == UpstreamLink::State::kConnected || options.bypass_link) return CallFate::kSend;
  if (options.fail_fast) return CallFate::kEndUnreachable;
  return CallFate::kHold;
}

AttemptFate FateAfterAttempt(UpstreamLink::State link, const UpstreamSendOptions& options,
                             const absl::Status& status) {
  if (!IsOutage(status)) return {CallFate::kEndAsAnswered, false};
  if (ReissueLinkEnded(link)) return {CallFate::kEndLinkFailure, false};
  if (options.fail_fast || options.bypass_link) return {CallFate::kEndAsAnswered, true};
  return {CallFate::kHold, true};
}

ParkedAttemptFate FateOfParkedAttempt(const ParkedAttempt& attempt, bool link_connected,
                                      const absl::Status& status) {
  if (attempt.stream_refused) return ParkedAttemptFate::kStreamRefused;
  if (!attempt.stream_current && IsOutage(status) && link_connected) {
    return ParkedAttemptFate::kStreamReplaced;
  }
  return ParkedAttemptFate::kAnswered;
}

}  // namespace cohort
