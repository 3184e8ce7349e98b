// UpstreamLink: the state of the proxy's link to the coordinator, and what it says of it.
#include "service/proxy/upstream_link.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "service/proxy/upstream_reissue_policy.h"
#include "spdlog/spdlog.h"

namespace cohort {

UpstreamLink::UpstreamLink(std::string address, absl::Duration outage_tolerance)
    : address_(std::move(address)), outage_tolerance_(outage_tolerance) {}

const char* UpstreamLink::StateName(State state) {
  switch (state) {
    case State::kNotYetConnected:
      return "not yet connected";
    case State::kConnected:
      return "connected";
    case State::kDown:
      return "down";
    case State::kFailed:
      return "failed";
    case State::kStopped:
      return "stopped";
  }
  return "unknown";
}

absl::Duration UpstreamLink::downtime() const {
  return state_ == State::kDown ? absl::Now() - down_since_ : absl::ZeroDuration();
}

void UpstreamLink::MarkDown() {
  if (state_ != State::kConnected) return;
  state_ = State::kDown;
  down_since_ = absl::Now();
  ++outages_;
  spdlog::warn("proxy: lost the coordinator at {}; holding calls for up to {}", address_,
               absl::FormatDuration(outage_tolerance_));
}

absl::Status UpstreamLink::FailIfPastTolerance() {
  if (state_ != State::kDown || absl::Now() - down_since_ <= outage_tolerance_) {
    return absl::OkStatus();
  }
  failure_ = OutageError();
  state_ = State::kFailed;
  return failure_;
}

bool UpstreamLink::Stop(const absl::Status& why) {
  if (state_ == State::kStopped) return false;
  state_ = State::kStopped;
  failure_ = why;
  return true;
}

void UpstreamLink::RecordProbe(const grpc::Status& status) {
  // A coordinator that answers but refuses the proxy is reached and still of no use: say
  // why, once, and in the error callers get past the tolerance.
  if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
      status.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
    if (refusal_.ok()) {
      spdlog::error(
          "proxy: the coordinator at {} refuses the proxy: {} (does the sidecar's "
          "--auth-token-file hold the job's token?)",
          address_, status.error_message());
    }
    refusal_ =
        absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  } else {
    refusal_ = absl::OkStatus();
  }
}

absl::Status UpstreamLink::LostJobError(uint64_t incarnation) const {
  if (state_ != State::kDown || service_incarnation_ == 0 || service_incarnation_ == incarnation) {
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat(
      "the coordinator at ", address_, " came back as service incarnation ", incarnation,
      " instead of ", service_incarnation_,
      ": it lost the job's state (run it with --state-dir to keep it across restarts)"));
}

std::shared_ptr<UpstreamPark> UpstreamLink::Connect(uint64_t incarnation,
                                                    v1::Coordinator::Stub* stub) {
  const State was = state_;
  state_ = State::kConnected;
  service_incarnation_ = incarnation;
  // A park stream that ended (with the old connection) is replaced; one still open keeps
  // its calls, which the coordinator still holds (the link went down on another call).
  // A coordinator that refused one is asked again after an outage (it may be newer now).
  if (was == State::kDown) park_unsupported_ = false;
  std::shared_ptr<UpstreamPark> old_park;
  if (park_ && park_->ended()) old_park = std::move(park_);
  if (!park_ && !park_unsupported_) park_ = UpstreamPark::Open(stub);
  return old_park;
}

CallFate UpstreamLink::FateOfNewCall(const UpstreamSendOptions& options,
                                     absl::Status* refused) const {
  const CallFate fate = cohort::FateOfNewCall(state_, options);
  if (fate == CallFate::kEndLinkFailure) *refused = failure_;
  if (fate == CallFate::kEndUnreachable) *refused = UnreachableError();
  return fate;
}

bool UpstreamLink::HoldsAfterAttempt(const UpstreamSendOptions& options, absl::Status* status) {
  const AttemptFate fate = FateAfterAttempt(state_, options, *status);
  if (fate.link_lost) MarkDown();
  if (fate.call == CallFate::kHold) return true;
  if (fate.call == CallFate::kEndLinkFailure) *status = failure_;
  return false;
}

bool UpstreamLink::ResendsParked(const std::shared_ptr<UpstreamPark>& parked_on,
                                 const grpc::Status& wire, const absl::Status& status) {
  const ParkedAttempt parked{parked_on->refused(), parked_on == park_};
  switch (FateOfParkedAttempt(parked, connected(), status)) {
    case ParkedAttemptFate::kStreamRefused:
      ParkRefused(parked_on, wire);
      return true;
    case ParkedAttemptFate::kStreamReplaced:
      return true;
    case ParkedAttemptFate::kAnswered:
      break;
  }
  return false;
}

absl::Status UpstreamLink::OutageError() const {
  return absl::UnavailableError(absl::StrCat(
      "the coordinator at ", address_, " has been unreachable for ",
      absl::FormatDuration(absl::Trunc(absl::Now() - down_since_, absl::Milliseconds(1))),
      ", longer than the sidecar proxy's outage tolerance (",
      absl::FormatDuration(outage_tolerance_), ")",
      refusal_.ok() ? "" : absl::StrCat("; it refuses the proxy: ", refusal_.ToString())));
}

absl::Status UpstreamLink::UnreachableError() const {
  if (state_ == State::kDown) return OutageError();
  return absl::UnavailableError(absl::StrCat(
      "the coordinator at ", address_, " has not been reached yet",
      refusal_.ok() ? "" : absl::StrCat(" (it refuses the proxy: ", refusal_.ToString(), ")")));
}

std::shared_ptr<UpstreamPark> UpstreamLink::ParkStream(v1::Coordinator::Stub* stub) {
  if (park_ && park_->ended() && !park_->refused() && state_ == State::kConnected) {
    // The stream ended while the coordinator stayed reachable (a reset stream, a proxy in
    // between): a new one, rather than an outage.
    park_ = UpstreamPark::Open(stub);
  }
  return park_;
}

void UpstreamLink::ParkRefused(const std::shared_ptr<UpstreamPark>& refused,
                               const grpc::Status& wire) {
  if (!park_unsupported_) {
    spdlog::warn(
        "proxy: the coordinator at {} refuses the park stream ({} {}); waiting "
        "calls go as a gRPC call each",
        address_, static_cast<int>(wire.error_code()), wire.error_message());
  }
  park_unsupported_ = true;
  if (park_ == refused) park_.reset();
}

}  // namespace cohort
