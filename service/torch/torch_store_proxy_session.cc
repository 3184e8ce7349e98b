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

bool WriteOrder::DoneBetweenExcept(uint64_t from, uint64_t ticket,
                                   const std::vector<uint64_t>& own) const {
  absl::MutexLock lock(&mu_);
  for (auto it = open_.upper_bound(from); it != open_.end() && *it <= ticket; ++it) {
    if (!std::binary_search(own.begin(), own.end(), *it)) return false;
  }
  return true;
}

TorchStoreProxySession::TorchStoreProxySession(CoordinationBackend* backend,
                                               std::shared_ptr<WriteOrder> order,
                                               std::string client, CodecLimits limits, Send send,
                                               End end, size_t max_held_bytes,
                                               size_t max_held_commands, TorchStoreMetrics* metrics)
    : backend_(backend),
      order_(std::move(order)),
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

bool TorchStoreProxySession::TakeFrontLocked(Command* command) {
  held_bytes_ -= HeldBytes(queue_.front().command);
  if (metrics_ != nullptr) metrics_->Held(-1);
  if (command != nullptr) *command = std::move(queue_.front().command);
  queue_.pop_front();
  if (!paused_ || held_bytes_ > max_held_bytes_ / 2 || queue_.size() > max_held_commands_ / 2) {
    return false;
  }
  paused_ = false;
  return true;
}

bool TorchStoreProxySession::Full() {
  absl::MutexLock lock(&mu_);
  const bool over = held_bytes_ > max_held_bytes_ || queue_.size() > max_held_commands_;
  if (!over || closed_ || failed_ || bad_input_) return false;
  paused_ = true;
  return true;
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
    {
      absl::MutexLock lock(&mu_);
      repump_ = false;
      while (out_ == 0 && !failed_ && !queue_.empty()) {
        Queued& head = queue_.front();
        // A wait the client cancelled, or one of a client that is gone, is not sent.
        if (head.cancelled || (closed_ && Waits(head.command.query))) {
          if (TakeFrontLocked(nullptr)) resume = resume_;
          continue;
        }
        if (head.after > 0 && !order_->DoneUpTo(head.after, [weak] {
              if (auto self = weak.lock()) self->Pump();
            })) {
          break;  // the proxy's earlier writes first
        }
        // Every write up to here is done: what the batch's later writes must ask about.
        uint64_t done_up_to = std::exchange(head.after, 0);
        uint64_t ticket = head.ticket;
        Command command;
        if (TakeFrontLocked(&command)) resume = resume_;
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
        std::vector<uint64_t> tickets;  // sorted
        if (AnswersNothing(command.query) && ticket == 0) ticket = order_->Issue();
        if (ticket != 0) tickets.push_back(ticket);
        call.command = EncodeCommand(command);
        // The writes right behind a write go with it, as long as they wait for no write of
        // another connection that is not done.
        size_t commands = 1;
        while (AnswersNothing(command.query) && !queue_.empty() && commands < kMaxBatchCommands) {
          Queued& next = queue_.front();
          if (next.cancelled || !AnswersNothing(next.command.query) ||
              call.command.size() + HeldBytes(next.command) > kMaxBatchBytes ||
              (next.after > done_up_to &&
               !order_->DoneBetweenExcept(done_up_to, next.after, tickets))) {
            break;
          }
          done_up_to = std::max(done_up_to, next.after);
          uint64_t next_ticket = next.ticket;
          Command write;
          if (TakeFrontLocked(&write)) resume = resume_;
          if (next_ticket == 0) next_ticket = order_->Issue();
          tickets.insert(std::upper_bound(tickets.begin(), tickets.end(), next_ticket),
                         next_ticket);
          call.command += EncodeCommand(write);
          ++commands;
        }
        call.client = client_;
        call.sequence = ChangesStore(command.query) ? sequence_ + 1 : 0;
        if (call.sequence != 0) sequence_ += commands;
        call.waits = Waits(command.query);
        waiter = backend_->NewWaiterId();
        out_ = waiter;
        out_tickets_ = std::move(tickets);
        out_waits_ = call.waits;
        out_cancelled_ = false;
        break;
      }
      if (waiter == 0) {
        if (repump_) continue;
        pumping_ = false;
        // A closed connection with nothing left to send: the coordinator forgets its record.
        if (closed_ && out_ == 0 && (queue_.empty() || failed_) && !forgotten_ && sequence_ > 0) {
          forgotten_ = forget = true;
        }
      }
    }
    if (resume) resume();  // the connection reads again
    if (forget) {
      ForwardedTorchCommand end;
      end.client = client_;
      end.end_client = true;
      backend_->TorchStoreCommand(CallContext{}, end, [](const absl::StatusOr<std::string>&) {});
      return;
    }
    if (waiter == 0) return;
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
    tickets = std::exchange(out_tickets_, {});
    if (reply.ok()) {
      if (!reply->empty() && !closed_) send_(std::move(*reply));
    } else if (!((out_cancelled_ || closed_) &&
                 reply.status().code() == absl::StatusCode::kCancelled)) {
      // (A WAIT the client cancelled, or one of a client that is gone, ends with no reply.)
      failed_ = true;
      fail = !closed_;
    }
  }
  for (uint64_t ticket : tickets) order_->Done(ticket);
  if (fail) {
    end_(absl::Status(reply.status().code(),
                      absl::StrCat("the coordinator: ", reply.status().message())));
  }
  Pump();
}

void TorchStoreProxySession::Closed() {
  WaiterId cancel = 0;
  std::vector<uint64_t> tickets;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    if (out_ != 0 && out_waits_) cancel = out_;
    if (failed_) {
      // Nothing more is sent: writes that will not be sent hold up nobody.
      for (const Queued& q : queue_) {
        if (q.ticket != 0) tickets.push_back(q.ticket);
      }
      if (metrics_ != nullptr) metrics_->Held(-static_cast<double>(queue_.size()));
      queue_.clear();
      held_bytes_ = 0;
    }
  }
  for (uint64_t ticket : tickets) order_->Done(ticket);
  if (cancel != 0) backend_->Cancel(cancel, absl::CancelledError("the connection closed"));
  Pump();  // what is left goes upstream; then the coordinator forgets the connection
}

}  // namespace cohort::torch
