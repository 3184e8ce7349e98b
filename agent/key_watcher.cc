#include "agent/key_watcher.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "agent/grpc_status.h"
#include "cohort/v1/coordinator.grpc.pb.h"
#include "spdlog/spdlog.h"

namespace cohort {
namespace {

KeyChange::Type FromProto(v1::KeyEvent::Type type) {
  switch (type) {
    case v1::KeyEvent::UPDATED:
      return KeyChange::Type::kUpdated;
    case v1::KeyEvent::DELETED:
      return KeyChange::Type::kDeleted;
    default:
      return KeyChange::Type::kInserted;
  }
}

// Worth opening the stream again: the coordinator was out of reach, restarting its
// listener, or ended a watcher that read too slowly. Anything else is final.
bool Retryable(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kResourceExhausted ||
         code == absl::StatusCode::kDeadlineExceeded || code == absl::StatusCode::kAborted ||
         code == absl::StatusCode::kCancelled;
}

}  // namespace

struct KeyWatcher::State {
  std::unique_ptr<v1::Coordinator::Stub> stub;
  std::string key;
  EventCallback callback;
  Options options;

  absl::Mutex mu;
  bool stopped ABSL_GUARDED_BY(mu) = false;
  grpc::ClientContext* open_context ABSL_GUARDED_BY(mu) = nullptr;
  int64_t created_revision = 0;  // set before the thread starts
  int64_t next_revision = 0;     // the reader thread's
  std::thread thread;

  struct Stream {
    std::unique_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::ClientReader<v1::WatchKeysResponse>> reader;
    v1::WatchKeysResponse created;
  };

  // Opens a stream and reads its `created` response.
  absl::StatusOr<Stream> Open(int64_t start_revision) {
    Stream stream;
    stream.context = std::make_unique<grpc::ClientContext>();
    {
      absl::MutexLock lock(&mu);
      if (stopped) return absl::CancelledError("the watch was stopped");
      open_context = stream.context.get();
    }
    v1::WatchKeysRequest request;
    request.set_key(key);
    request.set_start_revision(start_revision);
    stream.reader = stub->WatchKeys(stream.context.get(), request);
    if (!stream.reader->Read(&stream.created) || !stream.created.created()) {
      absl::Status status = FromGrpcStatus(stream.reader->Finish());
      Forget();
      if (status.ok()) status = absl::InternalError("the watch stream ended before it started");
      return status;
    }
    return stream;
  }

  void Forget() {
    absl::MutexLock lock(&mu);
    open_context = nullptr;
  }

  bool Stopped() {
    absl::MutexLock lock(&mu);
    return stopped;
  }

  // Waits `d` unless stopped first; true when stopped.
  bool SleepUnlessStopped(absl::Duration d) {
    absl::MutexLock lock(&mu);
    mu.AwaitWithTimeout(absl::Condition(&stopped), d);
    return stopped;
  }

  void Run(Stream stream) {
    absl::Time failing_since = absl::InfiniteFuture();
    absl::Duration backoff = absl::Milliseconds(50);
    while (true) {
      v1::WatchKeysResponse response;
      while (stream.reader->Read(&response)) {
        for (const v1::KeyEvent& event : response.events()) {
          if (Stopped()) break;
          callback(
              KeyChange{FromProto(event.type()), event.key(), event.value(), event.revision()});
          next_revision = event.revision() + 1;
        }
      }
      absl::Status status = FromGrpcStatus(stream.reader->Finish());
      Forget();
      if (Stopped()) return;
      // Reopen until it works, the error is final, or retrying has taken too long.
      while (true) {
        if (!Retryable(status.code())) return callback(status);
        if (failing_since == absl::InfiniteFuture()) failing_since = absl::Now();
        if (absl::Now() - failing_since > options.retry_for) {
          return callback(absl::UnavailableError(
              absl::StrCat("gave up watching \"", key, "\" after ",
                           absl::FormatDuration(options.retry_for), ": ", status.message())));
        }
        spdlog::debug("watch on \"{}\" dropped ({}); reopening from revision {}", key,
                      status.ToString(), next_revision);
        if (SleepUnlessStopped(backoff)) return;
        backoff = std::min(backoff * 2, absl::Seconds(2));
        auto reopened = Open(next_revision);
        if (reopened.ok()) {
          stream = std::move(*reopened);
          failing_since = absl::InfiniteFuture();
          backoff = absl::Milliseconds(50);
          break;
        }
        if (Stopped()) return;
        status = reopened.status();
      }
    }
  }
};

absl::StatusOr<std::unique_ptr<KeyWatcher>> KeyWatcher::Start(
    const std::shared_ptr<grpc::Channel>& channel, std::string key, EventCallback callback,
    Options options) {
  if (options.start_revision < 0) {
    return absl::InvalidArgumentError("the start revision cannot be negative");
  }
  auto state = std::make_shared<State>();
  state->stub = v1::Coordinator::NewStub(channel);
  state->key = std::move(key);
  state->callback = std::move(callback);
  state->options = options;
  auto stream = state->Open(options.start_revision);
  if (!stream.ok()) return stream.status();
  state->created_revision = stream->created.created_revision();
  state->next_revision =
      options.start_revision != 0 ? options.start_revision : state->created_revision + 1;
  // The thread holds the state, so that a Stop from inside the callback may let it finish.
  state->thread =
      std::thread([state, s = std::move(*stream)]() mutable { state->Run(std::move(s)); });
  return std::unique_ptr<KeyWatcher>(new KeyWatcher(std::move(state)));
}

KeyWatcher::~KeyWatcher() { Stop(); }

int64_t KeyWatcher::created_revision() const { return state_->created_revision; }

void KeyWatcher::Stop() {
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->stopped) return;
    state_->stopped = true;
    if (state_->open_context) state_->open_context->TryCancel();
  }
  if (!state_->thread.joinable()) return;
  if (state_->thread.get_id() == std::this_thread::get_id()) {
    state_->thread.detach();
  } else {
    state_->thread.join();
  }
}

}  // namespace cohort
