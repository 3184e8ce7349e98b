#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
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
// once: with torch's own server (one event loop) the read sees the write. Through a proxy the
// writes go upstream on their own (CommandStream) while each connection's other commands go one
// at a time, so such a command waits until every write the proxy received before it has been
// answered.
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

 private:
  mutable absl::Mutex mu_;
  uint64_t issued_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<uint64_t> open_ ABSL_GUARDED_BY(mu_);
  std::multimap<uint64_t, std::function<void()>> waiting_ ABSL_GUARDED_BY(mu_);
};

// The commands that answer at once (all but WAIT and BARRIER) of every connection of one
// proxy, carried upstream together (cohort.v1 TorchStoreBatch): each connection hands over a run
// of its writes (SET, MULTI_SET, APPEND, QUEUE_PUSH, which answer nothing) or its next other
// command when its turn comes, and the stream sends what it holds as one request at a time, in
// the order handed over, as much as a request takes. A request waits only for the one before
// it, so under load each carries the commands of many connections: 64 processes adding or
// writing at once cost a request per round trip, not one per command, and a read behind writes
// (which waits for every write received before it, WriteOrder) waits for a few requests.
//
// Past `max_held_bytes` or `max_held_commands` handed over and not yet answered, the proxy's
// connections stop reading (Full) until half of it went, so that what a read waits behind
// stays short whatever the number of connections writing.
class CommandStream : public std::enable_shared_from_this<CommandStream> {
 public:
  // One command, or a run of writes.
  struct Run {
    std::string client;
    uint64_t sequence = 0;  // the first command's (0: one that changes nothing)
    std::string commands;   // as torch's client encodes them, one after the other
    size_t count = 0;
    std::vector<uint64_t> tickets;  // of writes: WriteOrder's, done once the run was answered
    // Called once: the reply torch's server would send (none for writes), or why the
    // coordinator did not carry it out.
    std::function<void(absl::StatusOr<std::string>)> done;
    size_t held_bytes = 0;  // what it counts against max_held_bytes (Push sets it)
  };

  // How a request goes upstream: once, answered once (maybe before it returns).
  using Send =
      std::function<void(std::vector<ForwardedTorchCommand> commands,
                         CoordinationBackend::Done<std::vector<absl::StatusOr<std::string>>> done)>;
  // Through `backend` (TorchStoreBatch), as the sidecar's proxy sends.
  static Send Via(CoordinationBackend* backend);

  CommandStream(Send send, std::shared_ptr<WriteOrder> order,
                size_t max_held_bytes = kDefaultMaxHeldBytes,
                size_t max_held_commands = kDefaultMaxHeldCommands,
                TorchStoreMetrics* metrics = nullptr);

  static constexpr size_t kDefaultMaxHeldBytes = size_t{64} << 20;
  static constexpr size_t kDefaultMaxHeldCommands = 4096;
  // What one request carries at most: a first run of any size, then runs while the commands
  // stay under both.
  static constexpr size_t kMaxRequestCommands = 4096;
  static constexpr size_t kMaxRequestEntries = 4096;
  static constexpr size_t kMaxRequestBytes = size_t{1} << 20;

  // Takes `run` (its commands count as held: metrics) and sends it in turn.
  void Push(Run run);
  // Whether it holds too much now; if so, `resume` runs once half of it went.
  bool FullOrNotify(std::function<void()> resume);
  const std::shared_ptr<WriteOrder>& order() const { return order_; }

 private:
  // Sends the next request when none is out.
  void Kick();
  void Answered(absl::StatusOr<std::vector<absl::StatusOr<std::string>>> results);

  const Send send_;
  const std::shared_ptr<WriteOrder> order_;
  const size_t max_held_bytes_;
  const size_t max_held_commands_;
  TorchStoreMetrics* const metrics_;
  absl::Mutex mu_;
  std::deque<Run> pending_ ABSL_GUARDED_BY(mu_);
  std::vector<Run> out_ ABSL_GUARDED_BY(mu_);  // the request out
  bool sending_ ABSL_GUARDED_BY(mu_) = false;  // out_ is a request upstream
  bool kicking_ ABSL_GUARDED_BY(mu_) = false;
  bool rekick_ ABSL_GUARDED_BY(mu_) = false;
  size_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  size_t held_commands_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::function<void()>> resumes_ ABSL_GUARDED_BY(mu_);
};

// One TCPStore connection of a pod's processes, served by the pod's sidecar
// (--torch-store-proxy-listen) and carried to the coordinator command by command (cohort.v1
// TorchStore) through a backend: the sidecar's UpstreamBackend, which holds a call while the
// coordinator is away and sends it again once it is back, so a WAIT or a queue pop that blocks
// rides through a coordinator restart and torch sees none.
//
// Commands go upstream in the order they came, and their replies come back in that order
// (torch's client sends one and reads its reply; it sends CANCEL_WAIT while a WAIT is out). A
// run of writes that answer nothing (SET, MULTI_SET, APPEND, QUEUE_PUSH: what a process sends
// in a burst without waiting), up to kMaxBatchCommands of them or kMaxBatchBytes, goes to the
// proxy's CommandStream at once, which carries it upstream with the other connections'
// commands; any other command waits until every write the proxy received before it has been
// answered (WriteOrder), then goes on the stream too, except WAIT and BARRIER, which go as
// requests of their own (parked upstream). One such command is out at a time. VALIDATE, PING and
// CANCEL_WAIT are answered here: CANCEL_WAIT ends the WAIT that is out (a STOP_WAITING that came
// first is sent before WAIT_CANCELED, as torch's server does). Every command that changes the store
// carries the next sequence number of the connection, so the coordinator never carries it out twice
// (torch::ForwardedCommands). A command the coordinator refuses, or one that cannot reach it within
// the backend's outage tolerance, ends the connection with the reason, as a command torch's server
// refuses does. As torch's server carries out every command it read before a connection ended, so
// does the proxy: what was received before the client went away is still sent upstream (its replies
// go nowhere), except waits, which end.
class TorchStoreProxySession final : public TorchStoreHandler,
                                     public std::enable_shared_from_this<TorchStoreProxySession> {
 public:
  // `client`: a name for this connection that no other connection to the coordinator uses,
  // now or after a restart of the sidecar ([A-Za-z0-9._-], at most 128 bytes).
  // `stream`: shared by every connection of the proxy.
  // `max_held_bytes`, `max_held_commands`: past this much of commands received and not yet
  // sent upstream (keys, values and a fixed amount each), or this many of them, the connection
  // stops reading until half of it went: torch's client then blocks in its send, as with a
  // server that reads slowly, so a process writing faster than the coordinator answers neither
  // grows the sidecar without bound nor leaves its next read behind a long queue.
  // `metrics`: counts the commands read and those held (null: none).
  TorchStoreProxySession(CoordinationBackend* backend, std::shared_ptr<CommandStream> stream,
                         std::string client, CodecLimits limits, Send send, End end,
                         size_t max_held_bytes = kDefaultMaxHeldBytes,
                         size_t max_held_commands = kDefaultMaxHeldCommands,
                         TorchStoreMetrics* metrics = nullptr);
  ~TorchStoreProxySession() override;

  static constexpr size_t kDefaultMaxHeldBytes = size_t{64} << 20;
  static constexpr size_t kDefaultMaxHeldCommands = 1024;
  // What one run of writes handed to the stream holds at most: a first command of any size,
  // then writes while the keys and values stay under the bytes.
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
  // The stream answered a run of `count` commands holding `bytes` (HeldBytes).
  void RunDone(size_t count, size_t bytes, const absl::Status& status);
  // Whether what the connection holds is past its limits (`half`: past half of them).
  bool OverLocked(bool half) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

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
  enum class Take {
    kWrite,     // a write handed to the stream: held by the connection until answered
    kOnStream,  // another command handed to the stream
    kOther,     // a wait, a command answered here, or one not sent
  };
  bool TakeFrontLocked(Command* command, Take take) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Nothing more is sent: the queue goes, its writes' tickets to `tickets` (to be done).
  void FailLocked(std::vector<uint64_t>* tickets) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The stream took less than half of its limits again.
  void StreamDrained();

  CoordinationBackend* const backend_;
  const std::shared_ptr<CommandStream> stream_;
  WriteOrder* const order_;
  const std::string client_;
  CommandDecoder decoder_;
  const Send send_;
  const End end_;
  absl::Mutex mu_;
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  // The runs handed to the stream and not yet answered: how many, their commands and bytes,
  // and the last ticket among them (what the connection's next other command waits for).
  size_t stream_runs_ ABSL_GUARDED_BY(mu_) = 0;
  size_t stream_commands_ ABSL_GUARDED_BY(mu_) = 0;
  size_t stream_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  bool pumping_ ABSL_GUARDED_BY(mu_) = false;
  bool repump_ ABSL_GUARDED_BY(mu_) = false;
  // The command that is out: its waiter (0: none), whether it is a WAIT or BARRIER, and whether
  // the client cancelled it.
  WaiterId out_ ABSL_GUARDED_BY(mu_) = 0;
  bool out_waits_ ABSL_GUARDED_BY(mu_) = false;
  bool out_cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // A WAIT of one key goes with a GET of it; the GET's reply is kept for the GET the client
  // sends next, if it is of that key and no write came to the proxy in between (`after`: the
  // last write ticket issued when the WAIT was received).
  struct Prefetched {
    std::string key;
    uint64_t after = 0;
    std::string reply;
  };
  std::optional<Prefetched> out_prefetch_ ABSL_GUARDED_BY(mu_);  // of the WAIT out
  std::optional<Prefetched> prefetched_ ABSL_GUARDED_BY(mu_);
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
