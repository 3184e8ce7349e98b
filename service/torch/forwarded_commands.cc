#include "service/torch/forwarded_commands.h"

#include <utility>
#include <vector>

#include "absl/base/internal/endian.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "service/torch/torch_keys.h"
#include "service/torch/torch_store_session.h"

namespace cohort::torch {

namespace {

constexpr absl::string_view kLedgerDir = "torch-proxy";
constexpr size_t kMaxClientBytes = 128;

absl::Status ValidClient(absl::string_view client) {
  if (client.empty() || client.size() > kMaxClientBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the client name must be 1 to ", kMaxClientBytes,
                                                   " bytes (got ", client.size(), ")"));
  }
  for (char c : client) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the client name may hold only [A-Za-z0-9._-] (got \"", absl::CEscape(client), "\")"));
    }
  }
  return absl::OkStatus();
}

const std::string& ValidateBytes() {
  static const std::string* bytes = [] {
    Command validate;
    validate.query = Query::kValidate;
    validate.number = kValidationMagic;
    return new std::string(EncodeCommand(validate));
  }();
  return *bytes;
}

// The one whole command `bytes` holds.
absl::StatusOr<Command> DecodeOne(const std::string& bytes, const CodecLimits& limits) {
  if (bytes.empty()) return absl::InvalidArgumentError("the request carries no command");
  CommandDecoder decoder(limits);
  decoder.Feed(ValidateBytes());
  decoder.Feed(bytes);
  absl::StatusOr<std::optional<Command>> next = decoder.Next();  // the VALIDATE
  if (next.ok()) next = decoder.Next();
  if (!next.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a TCPStore command: ", next.status().message()));
  }
  if (!next->has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the command's ", bytes.size(), " bytes end before it does"));
  }
  if (decoder.buffered() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("the request holds more than one command (",
                                                   decoder.buffered(), " bytes after the first)"));
  }
  switch ((*next)->query) {
    case Query::kValidate:
    case Query::kCancelWait:
      return absl::InvalidArgumentError(absl::StrCat(
          QueryName((*next)->query), " is not forwarded: the forwarding side answers it"));
    default:
      return std::move(**next);
  }
}

// A client's record: its last sequence number (8 bytes, little-endian), then the reply.
std::string EncodeRecord(uint64_t sequence, absl::string_view reply) {
  std::string out(8, '\0');
  absl::little_endian::Store64(out.data(), sequence);
  out.append(reply.data(), reply.size());
  return out;
}

std::string StopWaiting() {
  std::string bytes;
  AppendU8(kStopWaiting, &bytes);
  return bytes;
}

}  // namespace

struct ForwardedCommands::Waiting {
  Done done;
  std::shared_ptr<TorchStoreSession> session;  // a WAIT's; null for a BARRIER's wait
};

ForwardedCommands::ForwardedCommands(CoordinationService* service, CodecLimits limits)
    : service_(service), limits_(limits) {}

ForwardedCommands::~ForwardedCommands() {
  std::vector<WaiterId> open;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [waiter, w] : waiting_) open.push_back(waiter);
  }
  for (WaiterId waiter : open) Cancel(waiter, absl::UnavailableError("the coordinator stops"));
}

std::string ForwardedCommands::LedgerKey(absl::string_view client) {
  return absl::StrCat(kLedgerDir, "/", client);
}

void ForwardedCommands::Execute(WaiterId waiter, const ForwardedCommand& request, Done done) {
  if (absl::Status s = ValidClient(request.client); !s.ok()) return done(s);
  if (request.end_client) {
    if (!request.command.empty()) {
      return done(absl::InvalidArgumentError("a request that ends its client carries no command"));
    }
    absl::StatusOr<bool> erased = service_->EraseKeyValue(LedgerKey(request.client));
    if (!erased.ok()) return done(erased.status());
    return done(std::string());
  }
  absl::StatusOr<Command> command = DecodeOne(request.command, limits_);
  if (!command.ok()) return done(command.status());
  if (!ChangesStore(command->query)) {
    if (command->query == Query::kWait) return Wait(waiter, request.command, std::move(done));
    return done(RunNow(request.command));
  }
  if (request.sequence == 0) {
    return done(absl::InvalidArgumentError(
        absl::StrCat(QueryName(command->query),
                     " changes the store: it needs a sequence number of its client (1, 2, ...)")));
  }
  // `done` is called outside the ledger's lock: it may send the next command.
  absl::StatusOr<std::string> reply = ApplyOnce(request, *command);
  if (!reply.ok()) return done(reply.status());
  if (command->query == Query::kBarrier) return Barrier(waiter, *command, std::move(done));
  done(std::move(reply));
}

absl::StatusOr<std::string> ForwardedCommands::ApplyOnce(const ForwardedCommand& request,
                                                         Command& command) {
  const std::string ledger_key = LedgerKey(request.client);
  absl::StatusOr<std::string> reply;
  // The record is read, the command carried out and the new record written under one hold of
  // the store's lock, and journaled as one: a coordinator killed at any moment has both or
  // neither, and a command sent again while its first attempt still runs finds its record.
  service_->KeyValueAtomically([&](KeyValueStore::Batch& kv) {
    absl::StatusOr<std::string> record = kv.TryGet(ledger_key);
    if (record.ok()) {
      if (record->size() < 8) {
        reply = absl::DataLossError(absl::StrCat("the record of client ", request.client, " at ",
                                                 ledger_key, " is not one this coordinator wrote (",
                                                 record->size(), " bytes)"));
        return;
      }
      const uint64_t last = absl::little_endian::Load64(record->data());
      if (last > request.sequence) {
        reply = absl::FailedPreconditionError(
            absl::StrCat("command ", request.sequence, " of client ", request.client,
                         " comes after its command ", last, " was answered: the client is broken"));
        return;
      }
      if (last == request.sequence) {
        reply = record->substr(8);  // answered before
        return;
      }
    } else if (record.status().code() != absl::StatusCode::kNotFound) {
      reply = record.status();
      return;
    }
    // A BARRIER's part here is its arrival, which must not count twice; the wait that follows
    // may be repeated.
    reply = ChangeStore(kv, command);
    if (!reply.ok()) return;
    if (absl::Status s = kv.Insert(ledger_key, EncodeRecord(request.sequence, *reply),
                                   /*allow_overwrite=*/true);
        !s.ok()) {
      reply =
          absl::Status(s.code(), absl::StrCat(QueryName(command.query),
                                              " was carried out, but the record that keeps it from "
                                              "being carried out twice could not be written: ",
                                              s.message()));
    }
  });
  return reply;
}

absl::StatusOr<std::string> ForwardedCommands::RunNow(const std::string& bytes) {
  std::string reply;
  absl::Status failed;
  auto session = std::make_shared<TorchStoreSession>(
      service_, limits_, [&reply](const std::string& b) { reply.append(b); },
      [&failed](absl::Status why) { failed = std::move(why); });
  session->Received(ValidateBytes());
  session->Received(bytes);
  session->Closed();
  if (!failed.ok()) return failed;
  return reply;
}

void ForwardedCommands::Wait(WaiterId waiter, const std::string& bytes, Done done) {
  auto waiting = std::make_shared<Waiting>();
  waiting->done = std::move(done);
  waiting->session = std::make_shared<TorchStoreSession>(
      service_, limits_, [this, waiter](std::string b) { Finish(waiter, std::move(b)); },
      [this, waiter](absl::Status why) { Finish(waiter, std::move(why)); });
  std::shared_ptr<TorchStoreSession> session = waiting->session;
  {
    absl::MutexLock lock(&mu_);
    waiting_[waiter] = std::move(waiting);
  }
  session->Received(ValidateBytes());
  session->Received(bytes);
  EndIfCancelled(waiter, session.get());
}

void ForwardedCommands::Barrier(WaiterId waiter, const Command& command, Done done) {
  auto waiting = std::make_shared<Waiting>();
  waiting->done = std::move(done);
  {
    absl::MutexLock lock(&mu_);
    waiting_[waiter] = std::move(waiting);
  }
  service_->WaitKeyValueAtLeast(
      StoreKey(command.keys[0]), command.number, waiter, std::nullopt, std::nullopt,
      [this, waiter](const absl::Status& s) {
        if (s.ok()) return Finish(waiter, StopWaiting());
        Finish(waiter, absl::Status(s.code(), absl::StrCat("BARRIER: ", s.message())));
      },
      ParkKind::kTorchStoreWait);
  EndIfCancelled(waiter, nullptr);
}

void ForwardedCommands::EndIfCancelled(WaiterId waiter, TorchStoreSession* session) {
  // Cancel, on another thread, may have come after the call was registered and before it
  // parked: it found nothing parked to end, and the call must not stay parked.
  {
    absl::MutexLock lock(&mu_);
    if (waiting_.contains(waiter)) return;  // still waiting, or cancellable
  }
  if (session) {
    session->Closed();
  } else {
    service_->Cancel(waiter, absl::CancelledError("the call was cancelled"));
  }
}

void ForwardedCommands::Finish(WaiterId waiter, absl::StatusOr<std::string> result) {
  std::shared_ptr<Waiting> waiting;
  {
    absl::MutexLock lock(&mu_);
    auto it = waiting_.find(waiter);
    if (it == waiting_.end()) return;  // answered or cancelled already
    waiting = std::move(it->second);
    waiting_.erase(it);
  }
  waiting->done(std::move(result));
}

bool ForwardedCommands::Cancel(WaiterId waiter, const absl::Status& status) {
  std::shared_ptr<Waiting> waiting;
  {
    absl::MutexLock lock(&mu_);
    auto it = waiting_.find(waiter);
    if (it == waiting_.end()) return false;
    waiting = std::move(it->second);
    waiting_.erase(it);
  }
  if (waiting->session) {
    waiting->session->Closed();  // cancels its parked calls; it answers nothing more
  } else {
    service_->Cancel(waiter, status);  // its callback finds the call answered
  }
  waiting->done(status);
  return true;
}

}  // namespace cohort::torch
