#pragma once
// UpstreamLink: the sidecar proxy's link to the coordinator as UpstreamConnection sees it: not
// yet connected, connected, down since when, or given up (failed or stopped) and why; the
// service incarnation that answered; whether the coordinator refuses the proxy; and the park
// stream of the current connection. It takes no lock of its own: the connection keeps it under
// its lock, with the held calls and the local tasks whose fate depends on it.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cohort/v1/coordinator.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "service/proxy/upstream_park.h"

namespace cohort {

// Of the reissue policy (upstream_reissue_policy.h, which needs this header).
enum class CallFate;
struct UpstreamSendOptions;

class UpstreamLink {
 public:
  enum class State { kNotYetConnected, kConnected, kDown, kFailed, kStopped };
  // The state's name, for metrics and logs.
  static const char* StateName(State state);

  // `address` and `outage_tolerance` as UpstreamOptions give them, for what the link says.
  UpstreamLink(std::string address, absl::Duration outage_tolerance);

  State state() const { return state_; }
  bool connected() const { return state_ == State::kConnected; }
  // Failed or stopped: every call ends with failure().
  bool ended() const { return state_ == State::kFailed || state_ == State::kStopped; }
  const absl::Status& failure() const { return failure_; }
  // How long the link has been down (zero when it is not).
  absl::Duration downtime() const;
  // Times the coordinator was lost after having been reached.
  int64_t outages() const { return outages_; }
  uint64_t service_incarnation() const { return service_incarnation_; }
  void set_service_incarnation(uint64_t incarnation) { service_incarnation_ = incarnation; }

  // A call failed for want of the coordinator: a connected link goes down.
  void MarkDown();
  // A down link past the outage tolerance fails with OutageError(), which it returns; OK
  // otherwise.
  absl::Status FailIfPastTolerance();
  // Ends the link with `why`; false when it was stopped already.
  bool Stop(const absl::Status& why);
  // The coordinator answered a probe with `status`: whether it refuses the proxy (a wrong or
  // missing token), said once, and in OutageError().
  void RecordProbe(const grpc::Status& status);
  // The coordinator answers again, as service incarnation `incarnation`: an error when the
  // link was down and it came back as another incarnation (it lost the job); OK otherwise.
  absl::Status LostJobError(uint64_t incarnation) const;
  // The link is up, with `incarnation`. Returns the park stream it replaced (one that ended
  // with the old connection), to be shut down outside the lock.
  std::shared_ptr<UpstreamPark> Connect(uint64_t incarnation, v1::Coordinator::Stub* stub);

  // The reissue policy's verdicts, read off the link and acted on in it. A call submitted now:
  // its fate (FateOfNewCall); `refused` is set to what it ends with when it ends at once.
  CallFate FateOfNewCall(const UpstreamSendOptions& options, absl::Status* refused) const;
  // An attempt ended with `*status` (FateAfterAttempt): a connected link goes down when it
  // failed for want of the coordinator; true when the call is to be held, and `*status`
  // becomes the link's failure when the call ends with it.
  bool HoldsAfterAttempt(const UpstreamSendOptions& options, absl::Status* status);
  // An attempt that went on the park stream `parked_on` ended with `wire` (`status` in the
  // core's terms): whether it is sent again at once (FateOfParkedAttempt), a refused stream
  // noted (ParkRefused).
  bool ResendsParked(const std::shared_ptr<UpstreamPark>& parked_on, const grpc::Status& wire,
                     const absl::Status& status);

  // What calls get once the outage lasts past the tolerance.
  absl::Status OutageError() const;
  // What a call that may not be held gets while the coordinator is away.
  absl::Status UnreachableError() const;

  // The park stream of the current connection; null before the first, or when the
  // coordinator has no Park (then every call goes unary).
  const std::shared_ptr<UpstreamPark>& park() const { return park_; }
  // The stream a call that waits long goes on now (null: it goes unary).
  std::shared_ptr<UpstreamPark> ParkStream(v1::Coordinator::Stub* stub);
  // The coordinator refused the stream `refused` (it has no Park, or a policy refuses it):
  // every call goes unary until the next reconnection.
  void ParkRefused(const std::shared_ptr<UpstreamPark>& refused, const grpc::Status& wire);
  // The park stream, handed over to be shut down or released outside the lock.
  std::shared_ptr<UpstreamPark> TakePark() { return std::move(park_); }

 private:
  const std::string address_;
  const absl::Duration outage_tolerance_;
  State state_ = State::kNotYetConnected;
  absl::Time down_since_;
  absl::Status failure_;  // in kFailed and kStopped
  int64_t outages_ = 0;
  uint64_t service_incarnation_ = 0;
  // The coordinator's last refusal of a probe (a wrong or missing token); OK otherwise.
  absl::Status refusal_;
  std::shared_ptr<UpstreamPark> park_;
  bool park_unsupported_ = false;
};

}  // namespace cohort
