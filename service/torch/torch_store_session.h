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

namespace cohort::torch {

// One TCPStore connection: the commands its client sends (tcpstore_codec.h), carried out on
// the coordinator's key-value store (keys under "torch/", torch_keys.h), and the replies. No
// sockets: the server gives it what it reads and sends what it answers.
//
// As torch's libuv server (the default since torch 2.4): GET and MULTI_GET of a missing key
// answer an empty value; WAIT and BARRIER park (kind torch_store_wait) until their keys are
// written, with no server-side timeout; CANCEL_WAIT ends them. A command that fails (a value
// ADD cannot read as a number, a key or value past the store's limits, too many waits) ends the
// connection, as in torch, and changes nothing (a MULTI_SET keeps the pairs before the one that
// failed, as torch's does); nothing after it runs. The queue commands (14 to 16) are not served
// yet: they end the connection with a reason.
class TorchStoreSession : public std::enable_shared_from_this<TorchStoreSession> {
 public:
  // `send` writes reply bytes to the client, in the order of its calls; `end` closes the
  // connection with the reason. Both may be called from any thread (a wait ends on the thread
  // of the write that ended it), `send` under the session's lock: neither may call back into
  // the session.
  using Send = std::function<void(std::string bytes)>;
  using End = std::function<void(absl::Status why)>;

  TorchStoreSession(CoordinationService* service, CodecLimits limits, Send send, End end);

  // Bytes read from the client. Not thread-safe: one reader per connection.
  void Received(absl::string_view bytes);
  // The connection is gone: its waits are cancelled.
  void Closed();

 private:
  absl::Status Execute(Command& command);
  // Starts a WAIT (or the wait of a BARRIER): one parked call per key still missing (or the
  // count), answered STOP_WAITING once all are.
  void StartWait(const std::vector<std::string>& keys, int64_t barrier_threshold);
  void WaitEnded(uint64_t seq, const absl::Status& status);
  // Cancels the waits under way (CANCEL_WAIT, a new WAIT, the end of the connection), and
  // sends `reply` (if any) in the same hold of the lock.
  void CancelWaits(const char* why, std::string reply = "");

  CoordinationService* const service_;
  CommandDecoder decoder_;
  const Send send_;
  const End end_;
  absl::Mutex mu_;
  uint64_t wait_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<WaiterId> waiting_ ABSL_GUARDED_BY(mu_);
  size_t remaining_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cohort::torch
