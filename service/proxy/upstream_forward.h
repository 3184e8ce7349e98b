#pragma once
// What the files of UpstreamBackend share and nobody else sees: a call to the
// coordinator (Forward), and Send, which turns a typed request into a Forward.

#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "service/proxy/upstream_backend.h"
#include "service/proxy/upstream_park.h"

namespace cohort {

// One call to the coordinator on behalf of its subscribers (one caller, or several that
// asked the same). Attempts are sequential: one is sent again only after the previous
// one ended for want of the coordinator.
struct UpstreamBackend::Forward {
  std::function<void(grpc::ClientContext*, std::function<void(grpc::Status)>)> start;
  const google::protobuf::Message* response = nullptr;
  std::shared_ptr<void> messages;  // the request and the response
  SendOptions options;
  absl::Time deadline = absl::InfiniteFuture();
  // Guarded by the backend's mu_.
  std::vector<std::pair<WaiterId, Subscriber>> subscribers;
  std::unique_ptr<grpc::ClientContext> context;
  // A call that may go on the park stream: writes its request into a ParkRequest, and takes
  // the result from a ParkResponse.
  std::function<void(v1::ParkRequest*)> park;
  std::function<void(const v1::ParkResponse&)> take_park_result;
  // Guarded by the backend's mu_: the stream the attempt out went on (null: a unary call).
  std::shared_ptr<UpstreamPark> parked_on;
  uint64_t park_id = 0;
  int attempts = 0;
  uint64_t request = 0;    // its request id's number (SendOptions::once); 0: none
  bool abandoned = false;  // every subscriber went away
  bool finished = false;
};

// The calls that can go on the park stream, and how their messages go into and out of it.
inline void ToPark(const tensorflow::PollForErrorRequest& request, absl::Time,
                   v1::ParkRequest* out) {
  *out->mutable_poll_for_error() = request;
}
inline void ToPark(const tensorflow::BarrierRequest& request, absl::Time, v1::ParkRequest* out) {
  *out->mutable_barrier() = request;
}
inline void ToPark(const tensorflow::GetKeyValueRequest& request, absl::Time deadline,
                   v1::ParkRequest* out) {
  // A timed get's own deadline travels as what is left of it at this attempt.
  auto* get = out->mutable_get_key_value();
  get->set_key(request.key());
  if (deadline != absl::InfiniteFuture()) {
    get->set_timeout_ms(std::max<int64_t>(1, absl::ToInt64Milliseconds(deadline - absl::Now())));
  }
}
inline void ToPark(const tensorflow::RegisterTaskRequest& request, absl::Time,
                   v1::ParkRequest* out) {
  *out->mutable_register_task() = request;
}
inline void ToPark(const tensorflow::ShutdownTaskRequest& request, absl::Time,
                   v1::ParkRequest* out) {
  *out->mutable_shutdown_task() = request;
}
inline void FromPark(const v1::ParkResponse& in, tensorflow::RegisterTaskResponse* out) {
  *out = in.register_task();
}
inline void FromPark(const v1::ParkResponse& in, tensorflow::ShutdownTaskResponse* out) {
  *out = in.shutdown_task();
}
inline void FromPark(const v1::ParkResponse& in, tensorflow::PollForErrorResponse* out) {
  *out = in.poll_for_error();
}
inline void FromPark(const v1::ParkResponse& in, tensorflow::BarrierResponse* out) {
  *out = in.barrier();
}
inline void FromPark(const v1::ParkResponse& in, tensorflow::GetKeyValueResponse* out) {
  *out = in.get_key_value();
}
template <typename Req>
constexpr bool kParkable = std::is_same_v<Req, tensorflow::PollForErrorRequest> ||
                           std::is_same_v<Req, tensorflow::BarrierRequest> ||
                           std::is_same_v<Req, tensorflow::GetKeyValueRequest> ||
                           std::is_same_v<Req, tensorflow::RegisterTaskRequest> ||
                           std::is_same_v<Req, tensorflow::ShutdownTaskRequest>;

template <typename Resp, typename Req, typename AsyncStub>
void SendVia(AsyncStub* async,
             void (AsyncStub::*method)(grpc::ClientContext*, const Req*, Resp*,
                                       std::function<void(grpc::Status)>),
             std::shared_ptr<std::pair<Req, Resp>> messages, grpc::ClientContext* ctx,
             std::function<void(grpc::Status)> done) {
  messages->second.Clear();
  (async->*method)(ctx, &messages->first, &messages->second, std::move(done));
}

template <typename Resp, typename Req>
void UpstreamBackend::Send(const CallContext& call,
                           void (Async::*method)(grpc::ClientContext*, const Req*, Resp*,
                                                 std::function<void(grpc::Status)>),
                           Req request, std::function<void(const absl::Status&, const Resp&)> done,
                           SendOptions options) {
  auto messages = std::make_shared<std::pair<Req, Resp>>();
  messages->first = std::move(request);
  auto op = std::make_shared<Forward>();
  Async* async = stub_->async();
  op->start = [async, method, messages](grpc::ClientContext* ctx,
                                        std::function<void(grpc::Status)> d) {
    SendVia(async, method, messages, ctx, std::move(d));
  };
  op->response = &messages->second;
  op->messages = messages;
  if constexpr (kParkable<Req>) {
    if (options.park) {
      op->park = [messages, deadline = options.deadline](v1::ParkRequest* out) {
        ToPark(messages->first, deadline, out);
      };
      op->take_park_result = [messages](const v1::ParkResponse& in) {
        FromPark(in, &messages->second);
      };
    }
  }
  // A shared call serves callers with different deadlines; each leaves on its own.
  op->deadline =
      options.share_key.empty() ? std::min(call.deadline, options.deadline) : options.deadline;
  if (options.once) {
    absl::MutexLock lock(&mu_);
    op->request = next_request_++;
    open_requests_.insert(op->request);
  }
  op->options = std::move(options);
  Submit(op, call.waiter,
         [done = std::move(done)](const absl::Status& s, const google::protobuf::Message& m) {
           done(s, static_cast<const Resp&>(m));
         });
}

}  // namespace cohort
