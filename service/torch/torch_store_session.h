#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "service/core/coordination_service.h"
#include "service/torch/tcpstore_codec.h"
#include "service/torch/torch_store_metrics.h"

namespace cohort::torch {

// What a TorchStoreServer connection feeds: the bytes its client sends, and its end. `Send`
// writes reply bytes to the client in the order of its calls; `End` closes the connection with
// the reason. Both may be called from any thread, neither may call back into the handler.
// Carries out, in `kv`, a command that changes the store (ChangesStore(c.query)); BARRIER's
// part here is its arrival alone, which answers nothing yet. Returns what torch's server
// answers (empty for SET, MULTI_SET, APPEND, QUEUE_PUSH, which it does not answer). Errors
// name the command. Takes the command's values.
absl::StatusOr<std::string> ChangeStore(KeyValueStore::Batch& kv, Command& c);

class TorchStoreHandler {
 public:
  using Send = std::function<void(std::string bytes)>;
  using End = std::function<void(absl::Status why)>;

  virtual ~TorchStoreHandler() = default;
  // Bytes read from the client. Not thread-safe: one reader per connection.
  virtual void Received(absl::string_view bytes) = 0;
  // The connection is gone: what it waits for is cancelled.
  virtual void Closed() = 0;
  // Flow control. After Received, whether the connection is to stop reading for now, the
  // handler holding as much as it may of what it read and has not carried out; it then calls
  // the function it was given by OnResume (from any thread) once it can take more. A
  // connection that is not stopped ignores that call.
  virtual bool Full() { return false; }
  virtual void OnResume(const std::function<void()>& /*resume*/) {}
};

// One TCPStore connection: the commands its client sends (tcpstore_codec.h), carried out on
// the coordinator's key-value store (keys under "torch/", torch_keys.h), and the replies. No
// sockets: the server gives it what it reads and sends what it answers.
//
// As torch's libuv server (the default since torch 2.4): GET and MULTI_GET of a missing key
// answer an empty value; WAIT and BARRIER park (kind torch_store_wait) until their keys are
// written, with no server-side timeout; CANCEL_WAIT ends them. A WAIT's call for a key ends also
// on a push into the queue of that name (KeyValueStore::WaitKeyOrQueue). Queues (QUEUE_PUSH,
// QUEUE_POP, QUEUE_LEN) live apart from the keys ("torch-queue/"): CHECK and WAIT count a queue
// with an item as a key that exists, and a push ends one WAIT on its name (the longest waiting),
// which is how torch's client blocks in queue_pop. A command that fails (a value ADD cannot read as
// a number, a key or value past the store's limits, too many waits) ends the connection, as in
// torch, and changes nothing (a MULTI_SET keeps the pairs before the one that failed, as
// torch's does); nothing after it runs.
class TorchStoreSession final : public TorchStoreHandler,
                                public std::enable_shared_from_this<TorchStoreSession> {
 public:
  // `send` is called under the session's lock (a wait ends on the thread of the write that
  // ended it). It goes straight out: whoever serves the session to a client holds replies
  // back until the changes before them are on disk (TorchStoreServer, through the service's
  // durability gate; ForwardedCommands answers through LocalBackend's).
  // `metrics`: counts each command read (null: none).
  TorchStoreSession(CoordinationService* service, CodecLimits limits, Send send, End end,
                    TorchStoreMetrics* metrics = nullptr);

  void Received(absl::string_view bytes) override;
  // Its waits are cancelled.
  void Closed() override;

 private:
  absl::Status Execute(Command& command);
  // Starts a WAIT (or the wait of a BARRIER): one parked call per key still missing (or the
  // count), answered STOP_WAITING once all are.
  void StartWait(const std::vector<std::string>& keys, int64_t barrier_threshold);
  // One of the wait's parked calls answered, or StartWait's own turn ended. Whether the answer
  // counted (false: the wait had ended).
  bool WaitEnded(uint64_t seq, const absl::Status& status);
  // Whether a key exists for CHECK and WAIT: its value, or an item in the queue of its name.
  absl::StatusOr<bool> Exists(absl::string_view key) const;
  // Cancels the waits under way (CANCEL_WAIT, a new WAIT, the end of the connection), and
  // sends `reply` (if any) in the same hold of the lock.
  void CancelWaits(const char* why, std::string reply = "");

  CoordinationService* const service_;
  TorchStoreMetrics* const metrics_;
  CommandDecoder decoder_;
  const Send send_;
  const End end_;
  absl::Mutex mu_;
  uint64_t wait_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // The parked calls of the wait under way, one per key (answered ones too: cancelling them is
  // a no-op).
  std::vector<WaiterId> waiting_ ABSL_GUARDED_BY(mu_);
  size_t remaining_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cohort::torch
