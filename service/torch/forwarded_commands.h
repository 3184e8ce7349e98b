#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "service/backend/coordination_backend.h"
#include "service/core/coordination_service.h"
#include "service/torch/tcpstore_codec.h"

namespace cohort::torch {

class TorchStoreSession;

// One TCPStore command that another process forwards (cohort.v1 TorchStore: a sidecar's
// --torch-store-proxy-listen, for one connection of its pod's processes): `client` names the
// forwarded connection, `sequence` the command's place among those of its commands that change
// the store (0 for one that does not), `command` is one whole command as torch's client encodes
// it, or several in a row that answer nothing (SET, MULTI_SET, APPEND, QUEUE_PUSH: a burst of
// writes, carried out in order as one, numbered `sequence`, `sequence` + 1, ...), or a WAIT of
// one key and a GET of it (what torch's get() sends, answered together once the WAIT ends, so
// that the forwarding side can answer the GET without asking again); `end_client`
// (with no command) says the connection is gone.
using ForwardedCommand = ::cohort::ForwardedTorchCommand;

// Carries out forwarded commands on the coordinator's store, as TorchStoreSession does for a
// connection of its own, and makes a command sent again harmless: the forwarding side sends
// a command again when the coordinator went away before answering, and it may have been
// carried out then. Each client's last answer to a command that changes the store is kept
// with its sequence number in the store itself, under "torch-proxy/<client>" (so it is as
// durable as the change, and visible to `cohortctl kv ls torch-proxy`); a command with that
// number gets the answer again, one with an older number is refused.
//
// The changes and that record are made as one (KeyValueStore::Atomically): one record of the
// journal, so a coordinator killed at any moment comes back with all or none. A request of
// several commands whose one is refused (a limit) leaves the changes of those before it and a
// record of the last of them: the request sent again carries out only the rest.
class ForwardedCommands {
 public:
  using Done = std::function<void(absl::StatusOr<std::string>)>;

  ForwardedCommands(CoordinationService* service, CodecLimits limits = {});
  ~ForwardedCommands();
  ForwardedCommands(const ForwardedCommands&) = delete;
  ForwardedCommands& operator=(const ForwardedCommands&) = delete;

  // Carries out `request` and answers `done` with the reply bytes torch's server would send,
  // once (maybe before it returns; WAIT and BARRIER when their keys are there). A request that
  // is not one whole command of those that may be forwarded, or names no valid client, is
  // INVALID_ARGUMENT and changes nothing; a command the store refuses (ADD of a value that is
  // not a number, a limit) answers the store's error.
  void Execute(WaiterId waiter, const ForwardedCommand& request, Done done);
  // Carries out the commands of several clients that answer at once (cohort.v1
  // TorchStoreBatch: each entry a request as Execute takes, but no WAIT or BARRIER), in order,
  // and answers each as Execute would. The entries that change the store between two that do
  // not are one change with their clients' records. An entry whose number its client's record
  // already holds (the request sent again) is answered from the record; one the store refuses
  // answers the store's error, and every later entry of that client is ABORTED, not tried; the
  // other clients' go on. A request with an entry that is not one Execute would carry out, or
  // whose numbers do not rise per client, is INVALID_ARGUMENT and changes nothing.
  absl::StatusOr<std::vector<absl::StatusOr<std::string>>> ExecuteBatch(
      const std::vector<ForwardedCommand>& entries);
  // Ends the call of `waiter` with `status`, if it is one of these; false otherwise.
  bool Cancel(WaiterId waiter, const absl::Status& status);

  // "torch-proxy/<client>".
  static std::string LedgerKey(absl::string_view client);

 private:
  struct Waiting;
  void Barrier(WaiterId waiter, const Command& command, Done done);
  // `then_get`: a GET carried out when the WAIT ends, its reply after the WAIT's (none: empty).
  void Wait(WaiterId waiter, const std::string& bytes, std::string then_get, Done done);
  // A WAIT's session answered it.
  void Replied(WaiterId waiter, const std::string& bytes);
  // Carries out the request's commands, which change the store, except those its client's
  // record says were: the reply, kept as that record. Takes the commands' values.
  absl::StatusOr<std::string> ApplyOnce(const ForwardedCommand& request,
                                        std::vector<Command>& commands);
  // A wait that is no longer registered (cancelled, or answered at once) must not stay parked.
  void EndIfCancelled(WaiterId waiter, TorchStoreSession* session);
  // Carries out a command that answers at once, on a session of its own.
  absl::StatusOr<std::string> RunNow(const std::string& bytes);
  void Finish(WaiterId waiter, absl::StatusOr<std::string> result);

  CoordinationService* const service_;
  const CodecLimits limits_;
  absl::Mutex mu_;
  absl::flat_hash_map<WaiterId, std::shared_ptr<Waiting>> waiting_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::torch
