#include "service/torch/torch_store_proxy_session.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace cohort::torch {

namespace {

bool Waits(Query query) { return query == Query::kWait || query == Query::kBarrier; }

}  // namespace

uint64_t WriteOrder::Issue() {
  absl::MutexLock lock(&mu_);
  open_.insert(++issued_);
  return issued_;
}

void WriteOrder::Done(uint64_t ticket) {
  std::vector<std::function<void()>> ready;
  {
    absl::MutexLock lock(&mu_);
    open_.erase(ticket);
    // Every write below the oldest still open is done.
    const uint64_t below = open_.empty() ? issued_ + 1 : *open_.begin();
    auto end = waiting_.lower_bound(below);
    for (auto it = waiting_.begin(); it != end; ++it) ready.push_back(std::move(it->second));
    waiting_.erase(waiting_.begin(), end);
  }
  for (auto& then : ready) then();
}

uint64_t WriteOrder::issued() const {
  absl::MutexLock lock(&mu_);
  return issued_;
}

bool WriteOrder::DoneUpTo(uint64_t ticket, std::function<void()> then) {
  absl::MutexLock lock(&mu_);
  if (open_.empty() || *open_.begin() > ticket) return true;
  waiting_.emplace(ticket, std::move(then));
  return false;
}

CommandStream::Send CommandStream::Via(CoordinationBackend* backend) {
  return [backend](const std::vector<ForwardedTorchCommand>& commands,
                   CoordinationBackend::Done<std::vector<absl::StatusOr<std::string>>> done) {
    backend->TorchStoreBatch(CallContext{backend->NewWaiterId(), absl::InfiniteFuture()}, commands,
                             std::move(done));
  };
}

CommandStream::CommandStream(Send send, std::shared_ptr<WriteOrder> order, size_t max_held_bytes,
                             size_t max_held_commands, TorchStoreMetrics* metrics)
    : send_(std::move(send)),
      order_(std::move(order)),
      max_held_bytes_(max_held_bytes),
      max_held_commands_(max_held_commands),
      metrics_(metrics) {}

void CommandStream::Push(Run run) {
  {
    absl::MutexLock lock(&mu_);
    run.held_bytes = run.commands.size();
    held_bytes_ += run.held_bytes;
    held_commands_ += run.count;
    pending_.push_back(std::move(run));
  }
  Kick();
}

bool CommandStream::FullOrNotify(std::function<void()> resume) {
  absl::MutexLock lock(&mu_);
  if (held_bytes_ <= max_held_bytes_ && held_commands_ <= max_held_commands_) return false;
  resumes_.push_back(std::move(resume));
  return true;
}

void CommandStream::Kick() {
  {
    absl::MutexLock lock(&mu_);
    if (kicking_) {
      rekick_ = true;  // the thread sending looks again before it stops
      return;
    }
    kicking_ = true;
  }
  for (;;) {
    std::vector<ForwardedTorchCommand> commands;
    size_t count = 0;
    {
      absl::MutexLock lock(&mu_);
      rekick_ = false;
      if (sending_ || pending_.empty()) {
        kicking_ = false;
        return;
      }
      size_t bytes = 0;
      while (!pending_.empty() && out_.size() < kMaxRequestEntries) {
        Run& run = pending_.front();
        if (!out_.empty() && (bytes + run.commands.size() > kMaxRequestBytes ||
                              count + run.count > kMaxRequestCommands)) {
          break;
        }
        bytes += run.commands.size();
        count += run.count;
        ForwardedTorchCommand& c = commands.emplace_back();
        c.client = run.client;
        c.sequence = run.sequence;
        c.command = std::move(run.commands);
        out_.push_back(std::move(run));
        pending_.pop_front();
      }
      sending_ = true;
    }
    if (metrics_ != nullptr) metrics_->Held(-static_cast<double>(count));
    // May answer before it returns: Answered's Kick then leaves the next request to this loop.
    send_(std::move(commands),
          [self = shared_from_this()](
              absl::StatusOr<std::vector<absl::StatusOr<std::string>>> results) {
            self->Answered(std::move(results));
          });
    absl::MutexLock lock(&mu_);
    if (!rekick_) {
      kicking_ = false;
      return;
    }
  }
}

void CommandStream::Answered(absl::StatusOr<std::vector<absl::StatusOr<std::string>>> results) {
  std::vector<Run> runs;
  std::vector<std::function<void()>> resumes;
  {
    absl::MutexLock lock(&mu_);
    runs = std::exchange(out_, {});
    sending_ = false;
    for (const Run& run : runs) {
      held_bytes_ -= run.held_bytes;
      held_commands_ -= run.count;
    }
    if (held_bytes_ <= max_held_bytes_ / 2 && held_commands_ <= max_held_commands_ / 2) {
      resumes = std::exchange(resumes_, {});
    }
  }
  // Writes that were not carried out hold up nobody either: their connections end.
  for (const Run& run : runs) {
    for (uint64_t ticket : run.tickets) order_->Done(ticket);
  }
  if (results.ok() && results->size() != runs.size()) {
    results = absl::InternalError(absl::StrCat("the coordinator answered ", results->size(),
                                               " results to ", runs.size(), " commands"));
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!results.ok()) {
      runs[i].done(results.status());
    } else {
      runs[i].done(std::move((*results)[i]));
    }
  }
  for (auto& resume : resumes) resume();
  Kick();
}

TorchStoreProxySession::TorchStoreProxySession(CoordinationBackend* backend,
                                               std::shared_ptr<CommandStream> stream,
                                               std::string client, CodecLimits limits, Send send,
                                               End end, size_t max_held_bytes,
                                               size_t max_held_commands, TorchStoreMetrics* metrics)
    : backend_(backend),
      stream_(std::move(stream)),
      order_(stream_->order().get()),
      client_(std::move(client)),
      decoder_(limits),
      send_(std::move(send)),
      end_(std::move(end)),
      metrics_(metrics),
      max_held_bytes_(max_held_bytes),
      max_held_commands_(max_held_commands) {}

size_t TorchStoreProxySession::HeldBytes(const Command& command) {
  size_t bytes = 64;  // the entry itself
  for (const std::string& key : command.keys) bytes += key.size();
  for (const std::string& value : command.values) bytes += value.size();
  return bytes;
}

TorchStoreProxySession::~TorchStoreProxySession() {
  // What a connection held and will not send leaves the count with it.
  absl::MutexLock lock(&mu_);
  if (metrics_ != nullptr && !queue_.empty()) metrics_->Held(-static_cast<double>(queue_.size()));
}

bool TorchStoreProxySession::OverLocked(bool half) const {
  const size_t bytes = held_bytes_ + stream_bytes_;
  const size_t commands = queue_.size() + stream_commands_;
  return half ? bytes > max_held_bytes_ / 2 || commands > max_held_commands_ / 2
              : bytes > max_held_bytes_ || commands > max_held_commands_;
}

bool TorchStoreProxySession::TakeFrontLocked(Command* command, Take take) {
  const size_t bytes = HeldBytes(queue_.front().command);
  held_bytes_ -= bytes;
  if (take == Take::kWrite) {
    // Still held, by the stream, until it is answered.
    stream_bytes_ += bytes;
    ++stream_commands_;
  }
  // The stream counts what it carries as sent when it sends it.
  if (take == Take::kOther && metrics_ != nullptr) metrics_->Held(-1);
  if (command != nullptr) *command = std::move(queue_.front().command);
  queue_.pop_front();
  if (!paused_ || OverLocked(/*half=*/true)) return false;
  paused_ = false;
  return true;
}

void TorchStoreProxySession::FailLocked(std::vector<uint64_t>* tickets) {
  failed_ = true;
  // Nothing more is sent: writes that will not be sent hold up nobody.
  for (const Queued& q : queue_) {
    if (q.ticket != 0) tickets->push_back(q.ticket);
  }
  if (metrics_ != nullptr) metrics_->Held(-static_cast<double>(queue_.size()));
  queue_.clear();
  held_bytes_ = 0;
}

bool TorchStoreProxySession::Full() {
  absl::MutexLock lock(&mu_);
  if (closed_ || failed_ || bad_input_) return false;
  // Its own limits, then the proxy's (every connection's writes not yet answered).
  if (!OverLocked(/*half=*/false) && !stream_->FullOrNotify([weak = weak_from_this()] {
        if (auto self = weak.lock()) self->StreamDrained();
      })) {
    return false;
  }
  paused_ = true;
  return true;
}

void TorchStoreProxySession::StreamDrained() {
  std::function<void()> resume;
  {
    absl::MutexLock lock(&mu_);
    if (!paused_ || OverLocked(/*half=*/true)) return;
    paused_ = false;
    resume = resume_;
  }
  if (resume) resume();  // reads again; Full says whether the stream filled up again
}

void TorchStoreProxySession::OnResume(const std::function<void()>& resume) {
  absl::MutexLock lock(&mu_);
  resume_ = resume;
}

void TorchStoreProxySession::Received(absl::string_view bytes) {
  decoder_.Feed(bytes);
  std::vector<WaiterId> cancels;
  for (;;) {
    absl::StatusOr<std::optional<Command>> next = decoder_.Next();
    if (!next.ok()) {
      {
        absl::MutexLock lock(&mu_);
        if (bad_input_ || closed_) return;
        bad_input_ = true;  // the rest of the connection's bytes are no commands
      }
      // The commands before the bad bytes still go upstream (Closed, which the end brings,
      // lets them), as torch's server carries out what it read before.
      for (WaiterId cancel : cancels) backend_->Cancel(cancel, absl::CancelledError("CANCEL_WAIT"));
      Pump();
      end_(next.status());
      return;
    }
    if (!next->has_value()) break;
    Command& command = **next;
    if (metrics_ != nullptr) metrics_->Command(command.query);
    {
      absl::MutexLock lock(&mu_);
      if (failed_ || closed_ || bad_input_) return;
      if (command.query == Query::kValidate) continue;
      if (command.query == Query::kCancelWait) {
        // It ends the WAIT right before it: one still queued is not sent at all, the one that is
        // out is cancelled (its WAIT_CANCELED goes out after the WAIT's answer, in turn).
        if (!queue_.empty()) {
          Queued& last = queue_.back();
          if (Waits(last.command.query)) last.cancelled = true;
        } else if (out_ != 0 && out_waits_ && !out_cancelled_) {
          out_cancelled_ = true;
          cancels.push_back(out_);
        }
      }
      Queued queued;
      queued.after = order_->issued();
      // A write takes its place among the proxy's now, unless it comes behind a wait of its own
      // connection (torch's client never sends one there): it takes it when its turn comes, so
      // that no other connection waits for a write that waits for it.
      bool behind_wait = out_ != 0 && out_waits_;
      for (const Queued& q : queue_) behind_wait = behind_wait || Waits(q.command.query);
      if (AnswersNothing(command.query) && !behind_wait) queued.ticket = order_->Issue();
      held_bytes_ += HeldBytes(command);
      if (metrics_ != nullptr) metrics_->Held(1);
      queued.command = std::move(command);
      queue_.push_back(std::move(queued));
    }
  }
  for (WaiterId cancel : cancels) backend_->Cancel(cancel, absl::CancelledError("CANCEL_WAIT"));
  Pump();
}

void TorchStoreProxySession::Pump() {
  {
    absl::MutexLock lock(&mu_);
    if (pumping_) {
      repump_ = true;  // the thread pumping looks again before it stops
      return;
    }
    pumping_ = true;
  }
  std::weak_ptr<TorchStoreProxySession> weak = weak_from_this();
  for (;;) {
    ForwardedTorchCommand call;
    WaiterId waiter = 0;
    bool forget = false;
    std::function<void()> resume;
    std::vector<CommandStream::Run> runs;
    {
      absl::MutexLock lock(&mu_);
      repump_ = false;
      while (out_ == 0 && !failed_ && !queue_.empty()) {
        Queued& head = queue_.front();
        // torch's get(): the GET right behind a WAIT of its key, answered with the WAIT when
        // no write came to the proxy in between (the value is then the one a GET sent now
        // would read, as far as this pod can tell).
        if (prefetched_ && head.command.query == Query::kGet && head.command.keys.size() == 1 &&
            head.command.keys[0] == prefetched_->key && head.after == prefetched_->after) {
          std::string reply = std::move(prefetched_->reply);
          prefetched_.reset();
          if (TakeFrontLocked(nullptr, Take::kOther)) resume = resume_;
          if (!closed_) send_(std::move(reply));
          continue;
        }
        prefetched_.reset();  // any other command: the next GET asks the coordinator
        // A wait the client cancelled, or one of a client that is gone, is not sent.
        if (head.cancelled || (closed_ && Waits(head.command.query))) {
          if (TakeFrontLocked(nullptr, Take::kOther)) resume = resume_;
          continue;
        }
        if (AnswersNothing(head.command.query)) {
          // A run of writes goes to the stream at once: it waits for nothing but the commands
          // of this connection before it.
          CommandStream::Run& run = runs.emplace_back();
          run.client = client_;
          run.sequence = sequence_ + 1;
          size_t bytes = 0;
          while (!queue_.empty() && AnswersNothing(queue_.front().command.query) &&
                 run.count < kMaxBatchCommands &&
                 (run.count == 0 ||
                  run.commands.size() + HeldBytes(queue_.front().command) <= kMaxBatchBytes)) {
            uint64_t ticket = queue_.front().ticket;
            bytes += HeldBytes(queue_.front().command);
            Command write;
            if (TakeFrontLocked(&write, Take::kWrite)) resume = resume_;
            if (ticket == 0) ticket = order_->Issue();
            run.tickets.push_back(ticket);
            last_ticket_ = std::max(last_ticket_, ticket);
            run.commands += EncodeCommand(write);
            ++run.count;
          }
          sequence_ += run.count;
          ++stream_runs_;
          run.done = [self = shared_from_this(), count = run.count,
                      bytes](const absl::StatusOr<std::string>& reply) {
            self->RunDone(count, bytes, reply.status());
          };
          continue;
        }
        // Any other command waits for every write received before it, and for this
        // connection's own writes handed to the stream.
        const uint64_t after = std::max(head.after, last_ticket_);
        if (after > 0 && !order_->DoneUpTo(after, [weak] {
              if (auto self = weak.lock()) self->Pump();
            })) {
          break;  // the proxy's earlier writes first
        }
        const uint64_t received_after = head.after;
        const bool on_stream = !Waits(head.command.query) && head.command.query != Query::kPing &&
                               head.command.query != Query::kCancelWait;
        Command command;
        if (TakeFrontLocked(&command, on_stream ? Take::kOnStream : Take::kOther)) {
          resume = resume_;
        }
        if (command.query == Query::kPing || command.query == Query::kCancelWait) {
          std::string reply;
          if (command.query == Query::kPing) {
            AppendU32(static_cast<uint32_t>(command.number), &reply);
          } else {
            AppendU8(kWaitCanceled, &reply);
          }
          if (!closed_) send_(std::move(reply));
          continue;
        }
        const uint64_t sequence = ChangesStore(command.query) ? ++sequence_ : 0;
        const WaiterId id = backend_->NewWaiterId();
        out_ = id;
        out_waits_ = Waits(command.query);
        out_cancelled_ = false;
        if (!out_waits_) {
          // On the stream, with the other connections' commands.
          CommandStream::Run& run = runs.emplace_back();
          run.client = client_;
          run.sequence = sequence;
          run.commands = EncodeCommand(command);
          run.count = 1;
          run.done = [self = shared_from_this(), id](absl::StatusOr<std::string> reply) {
            self->Answered(id, std::move(reply));
          };
          break;
        }
        // A wait parks upstream: a request of its own, which the client may cancel. A WAIT
        // of one key brings the key's value along (a GET behind it), for the GET that
        // torch's get() sends next.
        call.command = EncodeCommand(command);
        out_prefetch_.reset();
        if (command.query == Query::kWait && command.keys.size() == 1) {
          call.command += EncodeCommand({Query::kGet, {command.keys[0]}, {}, 0});
          out_prefetch_ = Prefetched{command.keys[0], received_after, ""};
        }
        call.client = client_;
        call.sequence = sequence;
        call.waits = true;
        waiter = id;
        break;
      }
      if (waiter == 0 && runs.empty()) {
        if (repump_) continue;
        pumping_ = false;
        // A closed connection with nothing left to send or answered: the coordinator forgets
        // its record.
        if (closed_ && out_ == 0 && stream_runs_ == 0 && (queue_.empty() || failed_) &&
            !forgotten_ && sequence_ > 0) {
          forgotten_ = forget = true;
        }
      }
    }
    if (resume) resume();  // the connection reads again
    // In the connection's order, before the command that follows them (it waits for them).
    const bool pushed = !runs.empty();
    for (CommandStream::Run& run : runs) stream_->Push(std::move(run));
    if (forget) {
      ForwardedTorchCommand end;
      end.client = client_;
      end.end_client = true;
      backend_->TorchStoreCommand(CallContext{}, end, [](const absl::StatusOr<std::string>&) {});
      return;
    }
    if (waiter == 0) {
      if (pushed) continue;  // the loop looks again
      return;
    }
    // May answer before it returns (Answered's Pump then leaves the next command to this loop).
    backend_->TorchStoreCommand(
        CallContext{waiter, absl::InfiniteFuture()}, call,
        [self = shared_from_this(), waiter](absl::StatusOr<std::string> reply) {
          self->Answered(waiter, std::move(reply));
        });
    // A cancellation that came between publishing the call and sending it found nothing to
    // cancel: it is made again now that the call is out (a second one changes nothing).
    bool cancel = false;
    {
      absl::MutexLock lock(&mu_);
      cancel = out_ == waiter && out_waits_ && (out_cancelled_ || closed_);
    }
    if (cancel) backend_->Cancel(waiter, absl::CancelledError("the wait was cancelled"));
  }
}

void TorchStoreProxySession::Answered(WaiterId waiter, absl::StatusOr<std::string> reply) {
  bool fail = false;
  std::vector<uint64_t> tickets;
  {
    absl::MutexLock lock(&mu_);
    if (waiter != out_) return;
    out_ = 0;
    std::optional<Prefetched> prefetch = std::exchange(out_prefetch_, std::nullopt);
    if (reply.ok() && prefetch && reply->size() > 1) {
      // STOP_WAITING for the client now; the GET's reply for the GET it sends next.
      prefetch->reply = reply->substr(1);
      reply->resize(1);
      prefetched_ = std::move(prefetch);
    }
    if (reply.ok()) {
      if (!reply->empty() && !closed_) send_(std::move(*reply));
    } else if (!((out_cancelled_ || closed_) &&
                 reply.status().code() == absl::StatusCode::kCancelled)) {
      // (A WAIT the client cancelled, or one of a client that is gone, ends with no reply.)
      fail = !closed_;
      FailLocked(&tickets);
    }
  }
  for (uint64_t ticket : tickets) order_->Done(ticket);
  if (fail) {
    end_(absl::Status(reply.status().code(),
                      absl::StrCat("the coordinator: ", reply.status().message())));
  }
  Pump();
}

void TorchStoreProxySession::RunDone(size_t count, size_t bytes, const absl::Status& status) {
  bool fail = false;
  std::vector<uint64_t> tickets;
  std::function<void()> resume;
  {
    absl::MutexLock lock(&mu_);
    --stream_runs_;
    stream_commands_ -= count;
    stream_bytes_ -= bytes;
    if (paused_ && !OverLocked(/*half=*/true)) {
      paused_ = false;
      resume = resume_;
    }
    if (!status.ok() && !failed_) {
      fail = !closed_;
      FailLocked(&tickets);
    }
  }
  for (uint64_t ticket : tickets) order_->Done(ticket);
  if (resume) resume();
  if (fail) {
    end_(absl::Status(status.code(), absl::StrCat("the coordinator: ", status.message())));
  }
  Pump();  // a command waiting for its turn, or the end of a closed connection
}

void TorchStoreProxySession::Closed() {
  WaiterId cancel = 0;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    if (out_ != 0 && out_waits_) cancel = out_;
  }
  if (cancel != 0) backend_->Cancel(cancel, absl::CancelledError("the connection closed"));
  Pump();  // what is left goes upstream; then the coordinator forgets the connection
}

}  // namespace cohort::torch
