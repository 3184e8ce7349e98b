#pragma once
// UpstreamCallTable: the calls the sidecar proxy forwards to the coordinator, as UpstreamConnection
// keeps track of them: the calls held until the coordinator is back (and the key watches that
// wait likewise), who subscribes to which call (so that a caller who goes away is found), the
// calls that several callers share, the attempts out, and the request ids of the calls sent
// "once" (their low mark). Also UpstreamCall, one such call, and UpstreamSendOptions, how it
// is sent. It takes no lock of its own: the connection keeps it under its lock, with the link
// whose state decides whether a call goes out, is held or fails, and calls the subscribers,
// the contexts and the streams it hands back once unlocked.

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cohort/v1/coordinator.grpc.pb.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"
#include "service/backend/coordination_backend.h"
#include "service/proxy/upstream_key_watch.h"
#include "service/proxy/upstream_park.h"

namespace cohort {

// How UpstreamConnection sends one call.
struct UpstreamSendOptions {
  // Identical calls (same key) of several callers share one upstream call.
  std::string share_key;
  // An upstream deadline of the call's own (a timed get), besides the caller's.
  absl::Time deadline = absl::InfiniteFuture();
  // Fails at once, rather than being held, when the coordinator cannot be reached.
  bool fail_fast = false;
  // Sent even while the link is down (re-registration is how the link comes back up).
  bool bypass_link = false;
  // Goes on the park stream (a call that may wait long: error polls, blocking gets,
  // barriers) rather than as a gRPC call of its own.
  bool park = false;
  // Looks again at an answer to an attempt that was sent more than once.
  std::function<void(const absl::Status&, const std::function<void(absl::Status)>&)>
      reconcile_reissued;
  // Carries a request id (kRequestMetadataKey), the same on every attempt, so that the
  // coordinator carries the call out once however often it is sent.
  bool once = false;
  // A heartbeat, an error poll or a job state watch: a stuck process keeps sending them, so
  // they are not its progress (UpstreamConnection::finished_calls).
  bool liveness = false;
  // A barrier (the register and shutdown barriers too): while it is open its caller waits on
  // its peers (UpstreamConnection::waiting_calls). Not blocking gets: clients keep those open
  // in the background (jaxlib does) whether or not their process makes progress.
  bool waits_on_peers = false;
};

// A caller of an upstream call: it gets the call's status and response.
using UpstreamSubscriber =
    std::function<void(const absl::Status&, const google::protobuf::Message&)>;

// One call to the coordinator on behalf of its subscribers (one caller, or several that
// asked the same). Attempts are sequential: one is sent again only after the previous
// one ended for want of the coordinator.
struct UpstreamCall {
  std::function<void(grpc::ClientContext*, std::function<void(grpc::Status)>)> start;
  const google::protobuf::Message* response = nullptr;
  std::shared_ptr<void> messages;  // the request and the response
  UpstreamSendOptions options;
  absl::Time deadline = absl::InfiniteFuture();
  // Guarded by the connection's mu_.
  std::vector<std::pair<WaiterId, UpstreamSubscriber>> subscribers;
  std::unique_ptr<grpc::ClientContext> context;
  // A call that may go on the park stream: writes its request into a ParkRequest, and takes
  // the result from a ParkResponse.
  std::function<void(v1::ParkRequest*)> park;
  std::function<void(const v1::ParkResponse&)> take_park_result;
  // Guarded by the connection's mu_: the stream the attempt out went on (null: a unary call).
  std::shared_ptr<UpstreamPark> parked_on;
  uint64_t park_id = 0;
  int attempts = 0;
  uint64_t request = 0;    // its request id's number (UpstreamSendOptions::once); 0: none
  bool abandoned = false;  // every subscriber went away
  bool finished = false;
};

class UpstreamCallTable {
 public:
  using Call = std::shared_ptr<UpstreamCall>;
  using Watch = std::shared_ptr<UpstreamKeyWatch>;
  using Subscribers = std::vector<std::pair<WaiterId, UpstreamSubscriber>>;

  // ---- Request ids ----------------------------------------------------------------------
  // The number of a new request id, open until its call finishes.
  uint64_t OpenRequest();
  // The lowest number of a request not yet answered: every request's low mark. Only while
  // one is open.
  uint64_t low_mark() const { return *open_requests_.begin(); }

  // ---- Calls submitted ------------------------------------------------------------------
  // The call `call` joins: the open call of its share key, when there is one; else `call`.
  Call SharedWith(const Call& call) const;
  // Callers of `call`'s share key (when it has one) join `call` from now on.
  void Share(const Call& call);
  // `subscriber` (of `waiter`; 0: a caller who cannot go away) gets `call`'s answer.
  void Subscribe(const Call& call, WaiterId waiter, UpstreamSubscriber subscriber);
  // `call` waits for the coordinator to come back.
  void Hold(const Call& call);
  size_t held() const { return held_.size(); }
  // Every held call, to be sent again or ended.
  std::vector<Call> TakeHeld();
  // The held calls whose deadline is `now` or past, to be ended.
  std::vector<Call> TakeExpired(absl::Time now);

  // ---- Attempts -------------------------------------------------------------------------
  // An attempt of `call` goes out: counted (one after the first is a call sent again), and
  // the call is live until AttemptAnswered. It is in flight until AttemptHandled.
  void AttemptSent(const Call& call);
  // An attempt of `call` goes out (AttemptSent): on `park` (its id there is returned) when
  // that is not null, else as a gRPC call of its own, with a new context (the call's
  // deadline, and its request id in `session` when it has one). The caller sends it.
  uint64_t SendAttempt(const Call& call, const std::shared_ptr<UpstreamPark>& park,
                       const std::string& session);
  // The attempt of `call` out ended.
  void AttemptAnswered(const Call& call) { live_.erase(call); }
  // What the attempt's answer set off is over.
  void AttemptHandled() { --in_flight_; }
  int64_t attempts_in_flight() const { return in_flight_; }
  // Attempts that failed for want of the coordinator and were sent again.
  int64_t reissued() const { return reissued_; }
  // The live calls whose attempt out is a gRPC call of its own (not on the park stream).
  std::vector<Call> UnaryAttempts() const;
  // Calls out or held that wait on the caller's peers (UpstreamSendOptions::waits_on_peers).
  int64_t WaitingCalls() const;

  // ---- Calls ending ---------------------------------------------------------------------
  // `call` finishes: marked so, its request id closed, no longer shared; its subscribers,
  // to be answered (none when it had finished already).
  Subscribers Finish(const Call& call);
  // `waiter` went away from the call it subscribed to.
  struct Departure {
    Call call;  // null: `waiter` subscribes to no call here
    UpstreamSubscriber subscriber;
    // The call's last subscriber left while an attempt was out: the attempt, to be cancelled
    // (its context, or its call on the park stream).
    grpc::ClientContext* context = nullptr;
    std::shared_ptr<UpstreamPark> park;
    uint64_t park_id = 0;
  };
  // The call left abandoned (every subscriber gone) is finished, and no longer held.
  Departure Unsubscribe(WaiterId waiter);
  // Every call known here (held, subscribed to, shared or live), to be released; the table
  // forgets them.
  std::vector<Call> TakeAll();

  // ---- Key watches ----------------------------------------------------------------------
  // `watch` is `waiter`'s, until it ends.
  void AddWatch(WaiterId waiter, Watch watch) { watches_[waiter] = std::move(watch); }
  void RemoveWatch(WaiterId waiter) { watches_.erase(waiter); }
  // `waiter`'s watch (null: none), forgotten.
  Watch TakeWatch(WaiterId waiter);
  // Every watch, forgotten.
  std::vector<Watch> TakeWatches();
  // `watch` waits for the coordinator to come back.
  void HoldWatch(Watch watch) { held_watches_.push_back(std::move(watch)); }
  std::vector<Watch> TakeHeldWatches();

 private:
  // The call no longer answers callers of its share key.
  void Unshare(const Call& call);

  // Calls waiting for the coordinator to come back.
  std::vector<Call> held_;
  std::vector<Watch> held_watches_;
  // Who to tell when a caller goes away.
  absl::flat_hash_map<WaiterId, Call> forwards_;
  absl::flat_hash_map<WaiterId, Watch> watches_;
  absl::flat_hash_map<std::string, Call> shared_;
  int64_t in_flight_ = 0;
  absl::flat_hash_set<Call> live_;  // attempts out
  int64_t reissued_ = 0;
  // Request ids: the next number, and the numbers of the calls not yet answered (the lowest
  // is every request's low mark).
  uint64_t next_request_ = 1;
  std::set<uint64_t> open_requests_;
};

}  // namespace cohort
