#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "service/backend/coordination_backend.h"
#include "service/torch/tcpstore_codec.h"
#include "service/torch/torch_store_metrics.h"
#include "service/torch/torch_store_session.h"

namespace cohort::torch {

// The order of the writes torch sends without waiting for an answer (SET, MULTI_SET, APPEND,
// QUEUE_PUSH) among all the connections of one proxy. torch's client returns from set() once
// the bytes are sent, so a process may set through one connection and read through another at
// once: with torch's own server (one event loop) the read sees the write. Through a proxy each
// connection's commands go upstream one at a time but the connections' go side by side, so a
// command waits until every such write the proxy received before it has been answered.
class WriteOrder {
 public:
  // A write received: its ticket (1, 2, ...).
  uint64_t Issue();
  // The write of `ticket` was answered, or will never be sent.
  void Done(uint64_t ticket);
  // The last ticket issued.
  uint64_t issued() const;
  // Whether every write up to `ticket` is done; if not, `then` runs once they are (on the
  // thread of the last Done), and false.
  bool DoneUpTo(uint64_t ticket, std::function<void()> then);
  // Whether every write after `from` up to `ticket` is done or one of `own` (sorted: writes
  // that go upstream together with the one asking, before it). Costs the writes still open in
  // that range, which a batch keeps small by asking only about what it did not ask before.
  bool DoneBetweenExcept(uint64_t from, uint64_t ticket, const std::vector<uint64_t>& own) const;

 private:
  mutable absl::Mutex mu_;
  uint64_t issued_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<uint64_t> open_ ABSL_GUARDED_BY(mu_);
  std::multimap<uint64_t, std::function<void()>> waiting_ ABSL_GUARDED_BY(mu_);
};

// One TCPStore connection of a pod's processes, served by the pod's sidecar
// (--torch-store-proxy-listen) and carried to the coordinator command by command (cohort.v1
// TorchStore) through a backend: the sidecar's UpstreamBackend, which holds a call while the
// coordinator is away and sends it again once it is back, so a WAIT or a queue pop that blocks
// rides through a coordinator restart and torch sees none.
//
// Commands go upstream one request at a time, in the order they came, and their replies come
// back in that order (torch's client sends one and reads its reply; it sends CANCEL_WAIT while a
// WAIT is out). A run of writes that answer nothing (SET, MULTI_SET, APPEND, QUEUE_PUSH: what a
// process sends in a burst without waiting) goes as one request, up to kMaxBatchCommands of them
// or kMaxBatchBytes, which the coordinator carries out in order as one. VALIDATE, PING and
// CANCEL_WAIT are answered here: CANCEL_WAIT ends the WAIT that is out (a STOP_WAITING that came
// first is sent before WAIT_CANCELED, as torch's server does). Every command that changes the store
// carries the next sequence number of the connection, so the coordinator never carries it out twice
// (torch::ForwardedCommands). A command the coordinator refuses, or one that cannot reach it within
// the backend's outage tolerance, ends the connection with the reason, as a command torch's server
// refuses does. A command waits for the writes of the proxy's other connections received before it
// (WriteOrder). As torch's server carries out every command it read before a connection ended, so
// does the proxy: what was received before the client went away is still sent upstream (its replies
// go nowhere), except waits, which end.
class TorchStoreProxySession final : public TorchStoreHandler,
                                     public std::enable_shared_from_this<TorchStoreProxySession> {
 public:
  // `client`: a name for this connection that no other connection to the coordinator uses,
  // now or after a restart of the sidecar ([A-Za-z0-9._-], at most 128 bytes).
  // `order`: shared by every connection of the proxy.
  // `max_held_bytes`, `max_held_commands`: past this much of commands received and not yet
  // sent upstream (keys, values and a fixed amount each), or this many of them, the connection
  // stops reading until half of it went: torch's client then blocks in its send, as with a
  // server that reads slowly, so a process writing faster than the coordinator answers neither
  // grows the sidecar without bound nor leaves its next read behind a long queue.
  // `metrics`: counts the commands read and those held (null: none).
  TorchStoreProxySession(CoordinationBackend* backend, std::shared_ptr<WriteOrder> order,
                         std::string client, CodecLimits limits, Send send, End end,
                         size_t max_held_bytes = kDefaultMaxHeldBytes,
                         size_t max_held_commands = kDefaultMaxHeldCommands,
                         TorchStoreMetrics* metrics = nullptr);
  ~TorchStoreProxySession() override;

  static constexpr size_t kDefaultMaxHeldBytes = size_t{64} << 20;
  static constexpr size_t kDefaultMaxHeldCommands = 1024;
  // What one request upstream carries at most: a first command of any size, then writes while
  // the keys and values stay under the bytes.
  static constexpr size_t kMaxBatchCommands = 256;
  static constexpr size_t kMaxBatchBytes = size_t{1} << 20;

  void Received(absl::string_view bytes) override;
  // Ends the wait that is out; the commands received before still go upstream, and then the
  // coordinator is told to forget the connection.
  void Closed() override;
  bool Full() override;
  void OnResume(const std::function<void()>& resume) override;

 private:
  // Sends the next command upstream, answering those that are answered here, until one is out.
  void Pump();
  void Answered(WaiterId waiter, absl::StatusOr<std::string> reply);

  // A command received, with the writes it must wait for (every ticket up to `after`) and its
  // own ticket if it is such a write (0 if not).
  struct Queued {
    Command command;
    uint64_t after = 0;
    uint64_t ticket = 0;
    bool cancelled = false;  // a WAIT or BARRIER the client cancelled before it was sent
  };

  // What a queued command counts against max_held_bytes.
  static size_t HeldBytes(const Command& command);
  // Removes the front of queue_ (its command moved to `command` when not null) and its count;
  // whether the connection may read again now.
  bool TakeFrontLocked(Command* command) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  CoordinationBackend* const backend_;
  const std::shared_ptr<WriteOrder> order_;
  const std::string client_;
  CommandDecoder decoder_;
  const Send send_;
  const End end_;
  absl::Mutex mu_;
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> out_tickets_ ABSL_GUARDED_BY(mu_);  // of the writes that are out
  bool pumping_ ABSL_GUARDED_BY(mu_) = false;
  bool repump_ ABSL_GUARDED_BY(mu_) = false;
  // The command that is out: its waiter (0: none), whether it is a WAIT or BARRIER, and whether
  // the client cancelled it.
  WaiterId out_ ABSL_GUARDED_BY(mu_) = 0;
  bool out_waits_ ABSL_GUARDED_BY(mu_) = false;
  bool out_cancelled_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t sequence_ ABSL_GUARDED_BY(mu_) = 0;
  // A command the coordinator refused, or bytes that are no command: nothing more is sent.
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  // The client is gone: replies go nowhere.
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool forgotten_ ABSL_GUARDED_BY(mu_) = false;  // end_client sent
  bool bad_input_ ABSL_GUARDED_BY(mu_) = false;  // bytes that are no command came
  TorchStoreMetrics* const metrics_;
  const size_t max_held_bytes_;
  const size_t max_held_commands_;
  size_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // of the commands in queue_
  bool paused_ ABSL_GUARDED_BY(mu_) = false;    // Full said so; resume_ not called since
  std::function<void()> resume_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::torch
