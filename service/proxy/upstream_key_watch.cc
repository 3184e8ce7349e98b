#include "service/proxy/upstream_key_watch.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "service/proxy/upstream_messages.h"
#include "service/rpc/status_translation.h"

namespace cohort {
namespace {

KeyChange::Type FromWire(v1::KeyEvent::Type type) {
  switch (type) {
    case v1::KeyEvent::UPDATED:
      return KeyChange::Type::kUpdated;
    case v1::KeyEvent::DELETED:
      return KeyChange::Type::kDeleted;
    default:
      return KeyChange::Type::kInserted;
  }
}

}  // namespace

// One stream to the coordinator; deletes itself when gRPC is done with it.
class UpstreamKeyWatch::Stream final : public grpc::ClientReadReactor<v1::WatchKeysResponse> {
 public:
  Stream(std::shared_ptr<UpstreamKeyWatch> owner, v1::WatchKeysRequest request)
      : owner_(std::move(owner)), request_(std::move(request)) {}
  std::shared_ptr<grpc::ClientContext> context() { return context_; }

  void Start(Async* async) {
    async->WatchKeys(context_.get(), &request_, this);
    StartRead(&response_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    owner_->OnResponse(response_);
    StartRead(&response_);
  }
  void OnDone(const grpc::Status& status) override {
    owner_->OnStreamDone(status);
    delete this;
  }

 private:
  const std::shared_ptr<UpstreamKeyWatch> owner_;
  const std::shared_ptr<grpc::ClientContext> context_ = std::make_shared<grpc::ClientContext>();
  const v1::WatchKeysRequest request_;
  v1::WatchKeysResponse response_;
};

UpstreamKeyWatch::UpstreamKeyWatch(WaiterId waiter, std::string key, int64_t start_revision,
                                   std::function<void()> notify, Started started, Hold hold,
                                   std::function<void()> on_end, KeyValueLimits limits)
    : waiter_(waiter),
      key_(std::move(key)),
      notify_(std::move(notify)),
      hold_(std::move(hold)),
      on_end_(std::move(on_end)),
      limits_(limits),
      started_(std::move(started)),
      next_revision_(start_revision) {}

void UpstreamKeyWatch::Begin(Async* async) {
  Stream* stream = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    v1::WatchKeysRequest request;
    request.set_key(key_);
    request.set_start_revision(next_revision_);
    stream = new Stream(shared_from_this(), std::move(request));
    stream_context_ = stream->context();
  }
  stream->Start(async);
}

void UpstreamKeyWatch::OnResponse(const v1::WatchKeysResponse& response) {
  Started started;
  std::shared_ptr<KeyWatch> watch;
  absl::Status overflow;
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    if (response.created() && !watch_) {
      watch_ = std::make_shared<KeyWatch>(waiter_, KeyValueStore::NormalizeKey(key_), notify_);
      watch_->set_created_revision(response.created_revision());
      if (next_revision_ == 0) next_revision_ = response.created_revision() + 1;
      started = std::move(started_);
      started_ = nullptr;
    }
    watch = watch_;
    if (!watch) return;
    for (const v1::KeyEvent& e : response.events()) {
      auto event = std::make_shared<const KeyChange>(
          KeyChange{FromWire(e.type()), e.key(), e.value(), e.revision()});
      if (!watch->Push(event, limits_.watch_queue_events, limits_.watch_queue_bytes)) {
        overflow = absl::ResourceExhaustedError(
            absl::StrCat("the watcher fell behind; watch again from revision ", e.revision()));
        break;
      }
      next_revision_ = e.revision() + 1;
    }
  }
  if (started) started(watch);
  watch->Notify();
  if (!overflow.ok()) End(overflow);
}

void UpstreamKeyWatch::OnStreamDone(const grpc::Status& wire) {
  absl::Status status = CoreStatusFromGrpc(wire);
  {
    absl::MutexLock lock(&mu_);
    stream_context_ = nullptr;
    if (ended_) return;
  }
  if (IsOutage(status)) {
    hold_(shared_from_this());
    return;
  }
  End(status.ok() ? absl::UnavailableError("the coordinator ended the watch") : status);
}

void UpstreamKeyWatch::End(const absl::Status& status) {
  Started started;
  std::shared_ptr<KeyWatch> watch;
  std::shared_ptr<grpc::ClientContext> context;
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    ended_ = true;
    started = std::move(started_);
    started_ = nullptr;
    watch = watch_;
    context = stream_context_;
  }
  if (context) context->TryCancel();
  if (started) {
    started(status);
  } else if (watch) {
    watch->FinishWithError(status);
  }
  on_end_();
}

}  // namespace cohort
