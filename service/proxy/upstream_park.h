#pragma once
// UpstreamPark: the proxy's end of one cohort.v1 Park stream to the coordinator. The calls
// that wait long (error polls, blocking gets, barriers) of every task of the pod go on it,
// so the coordinator holds one stream per pod instead of a gRPC call per waiting call.
// A stream lives as long as the connection it was opened on: when it ends, every call open
// on it ends UNAVAILABLE (the connection holds and re-sends them as after any outage), except
// that a stream refused before any answer (a coordinator without Park: UNIMPLEMENTED; or
// one that refuses it: UNAUTHENTICATED, PERMISSION_DENIED, ...) ends them with that status
// and says so in refused().

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "cohort/v1/coordinator.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace cohort {

class UpstreamPark final : public grpc::ClientBidiReactor<v1::ParkRequest, v1::ParkResponse>,
                           public std::enable_shared_from_this<UpstreamPark> {
 public:
  // The call's status as a unary call's, and its response (the `result` set when OK).
  using Done = std::function<void(const grpc::Status&, const v1::ParkResponse&)>;

  // Opens a stream on `stub`'s channel.
  static std::shared_ptr<UpstreamPark> Open(v1::Coordinator::Stub* stub);
  ~UpstreamPark() override = default;

  // An id for the next call.
  uint64_t NextId();
  // Sends `request` (its call set) under `id`; `done` is called once, on another thread or
  // at once when the stream has ended.
  void Send(uint64_t id, v1::ParkRequest request, Done done);
  // Asks the coordinator to end call `id` (it answers CANCELLED); unknown ids are ignored.
  void Cancel(uint64_t id);
  // Cancels the stream: every open call ends.
  void Shutdown();
  // Calls open right now.
  size_t open_calls() const;
  // The stream has ended: calls sent on it now end at once.
  bool ended() const;
  // It ended before any answer came, with a status other than UNAVAILABLE: the coordinator
  // will not take a park stream (the calls go unary).
  bool refused() const;

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  UpstreamPark() = default;
  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  grpc::ClientContext context_;
  v1::ParkResponse response_;  // the read in progress

  mutable absl::Mutex mu_;
  std::shared_ptr<UpstreamPark> self_ ABSL_GUARDED_BY(mu_);  // kept until OnDone
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, Done> open_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::ParkRequest> queue_ ABSL_GUARDED_BY(mu_);
  v1::ParkRequest writing_request_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_closed_ ABSL_GUARDED_BY(mu_) = false;  // the read failed: the stream is over
  bool answered_ ABSL_GUARDED_BY(mu_) = false;       // a response came
  bool refused_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status end_ ABSL_GUARDED_BY(mu_);  // what calls get once ended_
};

}  // namespace cohort
