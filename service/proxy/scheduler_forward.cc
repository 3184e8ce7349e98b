#include "service/proxy/scheduler_forward.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace cohort {

namespace {

constexpr char kSchedulerPrefix[] = "/Scheduler/";
// Client metadata passed on: the calls' numbers (runtime/rpc/task_messages.h). The token is
// the proxy's own; anything else stays in the pod.
constexpr const char* kForwardedMetadata[] = {"cohort-call"};

grpc::ByteBuffer EmptyMessage() {
  grpc::Slice empty;
  return grpc::ByteBuffer(&empty, 1);
}

}  // namespace

// One unary call: read the request, send it upstream, answer with what came back.
class SchedulerForward::Call final : public grpc::ServerGenericBidiReactor {
 public:
  Call(grpc::GenericStub* stub, grpc::GenericCallbackServerContext* ctx) : stub_(stub), ctx_(ctx) {
    if (!absl::StartsWith(ctx->method(), kSchedulerPrefix)) {
      Finish(
          grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                       absl::StrCat(ctx->method(),
                                    " is not served here: this endpoint serves the "
                                    "coordination protocols and the task runtime's /Scheduler/")));
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the call sent no request"));
      return;
    }
    upstream_.set_deadline(ctx_->deadline());
    // A coordinator that is restarting is waited for, up to the caller's deadline.
    upstream_.set_wait_for_ready(true);
    for (const auto& [key, value] : ctx_->client_metadata()) {
      for (const char* name : kForwardedMetadata) {
        if (key == name) upstream_.AddMetadata(name, std::string(value.data(), value.size()));
      }
    }
    // An empty message (AckReply, TaskInfoRequest) may arrive as no buffer at all; gRPC sends
    // only valid ones.
    if (!request_.Valid()) request_ = EmptyMessage();
    stub_->UnaryCall(&upstream_, ctx_->method(), grpc::StubOptions(), &request_, &reply_,
                     [this](const grpc::Status& s) {
                       if (s.ok()) {
                         if (!reply_.Valid()) reply_ = EmptyMessage();
                         StartWriteAndFinish(&reply_, grpc::WriteOptions(), s);
                       } else {
                         Finish(s);
                       }
                     });
  }

  void OnCancel() override { upstream_.TryCancel(); }
  void OnDone() override { delete this; }

 private:
  grpc::GenericStub* const stub_;
  grpc::GenericCallbackServerContext* const ctx_;
  grpc::ClientContext upstream_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer reply_;
};

SchedulerForward::SchedulerForward(std::shared_ptr<grpc::Channel> upstream)
    : stub_(std::move(upstream)) {}

grpc::ServerGenericBidiReactor* SchedulerForward::CreateReactor(
    grpc::GenericCallbackServerContext* ctx) {
  return new Call(&stub_, ctx);
}

}  // namespace cohort
