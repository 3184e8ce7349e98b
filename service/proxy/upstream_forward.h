#pragma once
// What the three files of UpstreamBackend share and nobody else sees: a call to the
// coordinator (Forward), a task registered through the proxy (LocalTask), and Send, which
// turns a typed request into a Forward.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "service/proxy/upstream_backend.h"

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
  int attempts = 0;
  bool abandoned = false;  // every subscriber went away
  bool finished = false;
};

// A task registered through this proxy.
struct UpstreamBackend::LocalTask {
  uint64_t incarnation = 0;
  uint64_t generation = 0;
  bool left = false;  // shut down or reset: not registered again on reconnect
  bool poll_running = false;
  absl::Status heartbeat_error;  // the service's answer to a forwarded heartbeat
  std::optional<absl::Status> poll_result;
  std::vector<std::pair<WaiterId, StatusDone>> polls;  // local callers' polls
};

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
  // A shared call serves callers with different deadlines; each leaves on its own.
  op->deadline =
      options.share_key.empty() ? std::min(call.deadline, options.deadline) : options.deadline;
  op->options = std::move(options);
  Submit(op, call.waiter,
         [done = std::move(done)](const absl::Status& s, const google::protobuf::Message& m) {
           done(s, static_cast<const Resp&>(m));
         });
}

}  // namespace cohort
