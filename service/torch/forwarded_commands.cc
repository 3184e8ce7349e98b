#include "service/torch/forwarded_commands.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/base/internal/endian.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "service/torch/torch_keys.h"
#include "service/torch/torch_store_session.h"

namespace cohort::torch {

namespace {

constexpr absl::string_view kLedgerDir = "torch-proxy";
constexpr size_t kMaxClientBytes = 128;
constexpr size_t kMaxCommandsPerRequest = 4096;
constexpr size_t kMaxEntriesPerBatch = 4096;

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

// The commands `bytes` holds: one whole command, or several that answer nothing
// (AnswersNothing), one after the other.
absl::StatusOr<std::vector<Command>> DecodeRequest(const std::string& bytes,
                                                   const CodecLimits& limits) {
  if (bytes.empty()) return absl::InvalidArgumentError("the request carries no command");
  CommandDecoder decoder(limits);
  decoder.Feed(ValidateBytes());
  decoder.Feed(bytes);
  absl::StatusOr<std::optional<Command>> next = decoder.Next();  // the VALIDATE
  std::vector<Command> commands;
  for (;;) {
    if (next.ok()) next = decoder.Next();
    if (!next.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("not a TCPStore command",
                       commands.empty() ? "" : absl::StrCat(" after ", commands.size()), ": ",
                       next.status().message()));
    }
    if (!next->has_value()) break;
    const Query query = (*next)->query;
    if (query == Query::kValidate || query == Query::kCancelWait) {
      return absl::InvalidArgumentError(
          absl::StrCat(QueryName(query), " is not forwarded: the forwarding side answers it"));
    }
    // A WAIT of one key and a GET of it: torch's get(), answered at once when the WAIT ends.
    const bool wait_then_get = commands.size() == 1 && commands[0].query == Query::kWait &&
                               commands[0].keys.size() == 1 && query == Query::kGet &&
                               (*next)->keys == commands[0].keys;
    if (!commands.empty() && !wait_then_get &&
        (!AnswersNothing(query) || !AnswersNothing(commands[0].query))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a request of several commands holds only SET, MULTI_SET, APPEND and QUEUE_PUSH, or "
          "a WAIT of one key and a GET of it (",
          QueryName(commands[0].query), " then ", QueryName(query), ")"));
    }
    if (commands.size() == kMaxCommandsPerRequest) {
      return absl::InvalidArgumentError(
          absl::StrCat("a request holds at most ", kMaxCommandsPerRequest, " commands"));
    }
    commands.push_back(std::move(**next));
  }
  if (commands.empty() || decoder.buffered() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("the request's last command (",
                                                   decoder.buffered(), " of its ", bytes.size(),
                                                   " bytes) ends before it does"));
  }
  return commands;
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
  std::string then_get;  // a GET to carry out once the WAIT ends, answered with it
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
  absl::StatusOr<std::vector<Command>> commands = DecodeRequest(request.command, limits_);
  if (!commands.ok()) return done(commands.status());
  const Query first = commands->front().query;
  if (!ChangesStore(first)) {
    if (first == Query::kWait) {
      if (commands->size() == 1) return Wait(waiter, request.command, "", std::move(done));
      return Wait(waiter, EncodeCommand((*commands)[0]), EncodeCommand((*commands)[1]),
                  std::move(done));
    }
    return done(RunNow(request.command));
  }
  if (request.sequence == 0) {
    return done(absl::InvalidArgumentError(
        absl::StrCat(QueryName(first),
                     " changes the store: it needs a sequence number of its client (1, 2, ...)")));
  }
  // `done` is called outside the ledger's lock: it may send the next command.
  absl::StatusOr<std::string> reply = ApplyOnce(request, *commands);
  if (!reply.ok()) return done(reply.status());
  if (first == Query::kBarrier) return Barrier(waiter, commands->front(), std::move(done));
  done(std::move(reply));
}

absl::StatusOr<std::string> ForwardedCommands::ApplyOnce(const ForwardedCommand& request,
                                                         std::vector<Command>& commands) {
  const std::string ledger_key = LedgerKey(request.client);
  const uint64_t first = request.sequence;
  const uint64_t last = first + commands.size() - 1;
  const std::string numbers =
      first == last ? absl::StrCat("command ", first) : absl::StrCat("commands ", first, "-", last);
  absl::StatusOr<std::string> reply;
  // The record is read, the commands carried out and the new record written under one hold of
  // the store's lock, and journaled as one: a coordinator killed at any moment has all or
  // none, and a request sent again while its first attempt still runs finds its record.
  service_->KeyValueAtomically([&](KeyValueStore::Batch& kv) {
    size_t start = 0;  // the first command not carried out yet
    absl::StatusOr<std::string> record = kv.TryGet(ledger_key);
    if (record.ok()) {
      if (record->size() < 8) {
        reply = absl::DataLossError(absl::StrCat("the record of client ", request.client, " at ",
                                                 ledger_key, " is not one this coordinator wrote (",
                                                 record->size(), " bytes)"));
        return;
      }
      const uint64_t done = absl::little_endian::Load64(record->data());
      if (done > last) {
        reply = absl::FailedPreconditionError(absl::StrCat(numbers, " of client ", request.client,
                                                           " come after its command ", done,
                                                           " was answered: the client is broken"));
        return;
      }
      if (done == last) {
        reply = record->substr(8);  // answered before
        return;
      }
      // A request whose first attempt stopped at a command the store refused: the commands
      // before that one were carried out then.
      if (done >= first) start = done - first + 1;
    } else if (record.status().code() != absl::StatusCode::kNotFound) {
      reply = record.status();
      return;
    }
    // A BARRIER's part here is its arrival, which must not count twice; the wait that follows
    // may be repeated.
    std::string replies;
    size_t carried = 0;
    absl::Status refused;
    for (size_t i = start; i < commands.size(); ++i) {
      absl::StatusOr<std::string> one = ChangeStore(kv, commands[i]);
      if (!one.ok()) {
        refused = commands.size() == 1
                      ? one.status()
                      : absl::Status(one.status().code(),
                                     absl::StrCat("command ", i + 1, " of ", commands.size(), " (",
                                                  QueryName(commands[i].query),
                                                  "): ", one.status().message()));
        break;
      }
      replies += *one;
      ++carried;
    }
    // A refused command leaves no record of its own; those before it do.
    if (carried > 0) {
      if (absl::Status s = kv.Insert(ledger_key, EncodeRecord(first + start + carried - 1, replies),
                                     /*allow_overwrite=*/true);
          !s.ok()) {
        reply = absl::Status(
            s.code(), absl::StrCat(QueryName(commands[start].query),
                                   " was carried out, but the record that keeps it from being "
                                   "carried out twice could not be written: ",
                                   s.message()));
        return;
      }
    }
    if (refused.ok()) {
      reply = std::move(replies);
    } else {
      reply = refused;
    }
  });
  return reply;
}

absl::StatusOr<std::vector<absl::StatusOr<std::string>>> ForwardedCommands::ExecuteBatch(
    const std::vector<ForwardedCommand>& entries) {
  if (entries.empty()) return absl::InvalidArgumentError("the request carries no commands");
  if (entries.size() > kMaxEntriesPerBatch) {
    return absl::InvalidArgumentError(absl::StrCat("a request holds at most ", kMaxEntriesPerBatch,
                                                   " entries (got ", entries.size(), ")"));
  }
  // Every entry is checked before anything changes.
  std::vector<std::vector<Command>> decoded;
  decoded.reserve(entries.size());
  absl::flat_hash_map<absl::string_view, uint64_t> next_number;  // per client, in the request
  for (size_t i = 0; i < entries.size(); ++i) {
    const ForwardedCommand& e = entries[i];
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("entry ", i + 1, " of ", entries.size(), " (client \"",
                       absl::CEscape(e.client.substr(0, kMaxClientBytes)), "\"): ", why));
    };
    if (absl::Status s = ValidClient(e.client); !s.ok()) return bad(s.message());
    if (e.end_client) return bad("an entry of a batch does not end its client");
    absl::StatusOr<std::vector<Command>> commands = DecodeRequest(e.command, limits_);
    if (!commands.ok()) return bad(commands.status().message());
    const Query first = commands->front().query;
    if (first == Query::kWait || first == Query::kBarrier) {
      return bad(absl::StrCat(QueryName(first),
                              " waits: send it as a TorchStore request of its own (on a Park "
                              "stream)"));
    }
    if (ChangesStore(first)) {
      if (e.sequence == 0) {
        return bad(absl::StrCat(QueryName(first),
                                " changes the store: it needs a sequence number of its client"));
      }
      uint64_t& next = next_number[e.client];
      if (e.sequence < next) {
        return bad(absl::StrCat("its numbers start at ", e.sequence,
                                ", not after those of the client's entry before it (", next - 1,
                                ")"));
      }
      next = e.sequence + commands->size();
    }
    decoded.push_back(*std::move(commands));
  }

  std::vector<absl::StatusOr<std::string>> results(entries.size(), std::string());
  absl::flat_hash_set<absl::string_view> refused;  // clients with an entry not carried out
  auto skip = [&](size_t i) {
    if (!refused.contains(entries[i].client)) return false;
    results[i] = absl::AbortedError(
        absl::StrCat("an earlier command of client ", entries[i].client,
                     " in the same request was refused: this one was not tried"));
    return true;
  };
  for (size_t i = 0; i < entries.size();) {
    if (!ChangesStore(decoded[i].front().query)) {
      if (!skip(i)) {
        results[i] = RunNow(entries[i].command);
        if (!results[i].ok()) refused.insert(entries[i].client);
      }
      ++i;
      continue;
    }
    // The entries that change the store, up to the next that does not: one change with their
    // clients' records (see ApplyOnce).
    size_t end = i;
    while (end < entries.size() && ChangesStore(decoded[end].front().query)) ++end;
    service_->KeyValueAtomically([&](KeyValueStore::Batch& kv) {
      struct Client {
        uint64_t done = 0;  // the last number carried out, from its record and this request
        std::string reply;  // that command's
        bool touched = false;
        size_t last_entry = 0;
      };
      absl::flat_hash_map<absl::string_view, Client> clients;
      for (size_t k = i; k < end; ++k) {
        if (skip(k)) continue;
        const ForwardedCommand& e = entries[k];
        auto [it, fresh] = clients.try_emplace(e.client);
        Client& client = it->second;
        if (fresh) {
          absl::StatusOr<std::string> record = kv.TryGet(LedgerKey(e.client));
          if (record.ok() && record->size() >= 8) {
            client.done = absl::little_endian::Load64(record->data());
            client.reply = record->substr(8);
          } else if (record.ok() || record.status().code() != absl::StatusCode::kNotFound) {
            refused.insert(e.client);
            results[k] = record.ok()
                             ? absl::DataLossError(absl::StrCat("the record of client ", e.client,
                                                                " at ", LedgerKey(e.client),
                                                                " is not one this coordinator "
                                                                "wrote (",
                                                                record->size(), " bytes)"))
                             : record.status();
            continue;
          }
        }
        std::vector<Command>& commands = decoded[k];
        const bool writes = AnswersNothing(commands.front().query);
        const uint64_t last = e.sequence + commands.size() - 1;
        if (client.done > last && !writes) {
          refused.insert(e.client);
          results[k] = absl::FailedPreconditionError(
              absl::StrCat("command ", last, " of client ", e.client, " comes after its command ",
                           client.done, " was answered: the client is broken"));
          continue;
        }
        if (client.done >= last) {  // carried out before: the request was sent again
          results[k] = writes ? std::string() : client.reply;
          continue;
        }
        // Writes whose first attempt stopped at one the store refused: those before it were
        // carried out then.
        const size_t start = client.done >= e.sequence ? client.done - e.sequence + 1 : 0;
        std::string replies;
        for (size_t c = start; c < commands.size(); ++c) {
          absl::StatusOr<std::string> one = ChangeStore(kv, commands[c]);
          if (!one.ok()) {
            refused.insert(e.client);
            results[k] = commands.size() == 1
                             ? one.status()
                             : absl::Status(one.status().code(),
                                            absl::StrCat("command ", c + 1, " of ", commands.size(),
                                                         " (", QueryName(commands[c].query),
                                                         "): ", one.status().message()));
            break;
          }
          replies += *one;
          client.done = e.sequence + c;
          client.touched = true;
          client.last_entry = k;
        }
        // The record keeps the reply of the command its number names: this entry's, if it
        // carried anything out (a refused first command leaves the earlier entry's).
        if (client.touched && client.last_entry == k) client.reply = replies;
        if (results[k].ok()) results[k] = std::move(replies);
      }
      // A refused command leaves no record of its own; those before it do.
      for (const auto& [name, client] : clients) {
        if (!client.touched) continue;
        if (absl::Status s = kv.Insert(LedgerKey(name), EncodeRecord(client.done, client.reply),
                                       /*allow_overwrite=*/true);
            !s.ok()) {
          refused.insert(name);
          results[client.last_entry] = absl::Status(
              s.code(), absl::StrCat("the command was carried out, but the record that keeps it "
                                     "from being carried out twice could not be written: ",
                                     s.message()));
        }
      }
    });
    i = end;
  }
  return results;
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

void ForwardedCommands::Wait(WaiterId waiter, const std::string& bytes, std::string then_get,
                             Done done) {
  auto waiting = std::make_shared<Waiting>();
  waiting->done = std::move(done);
  waiting->then_get = std::move(then_get);
  waiting->session = std::make_shared<TorchStoreSession>(
      service_, limits_, [this, waiter](const std::string& b) { Replied(waiter, b); },
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

void ForwardedCommands::Replied(WaiterId waiter, const std::string& bytes) {
  std::string then_get;
  {
    absl::MutexLock lock(&mu_);
    auto it = waiting_.find(waiter);
    if (it == waiting_.end()) return;  // cancelled
    then_get = std::move(it->second->then_get);
  }
  if (then_get.empty()) return Finish(waiter, bytes);
  // The WAIT ended (STOP_WAITING; the store's wake-ups come outside its lock): the GET now,
  // as the client would send it next.
  absl::StatusOr<std::string> got = RunNow(then_get);
  if (!got.ok()) return Finish(waiter, got.status());
  Finish(waiter, absl::StrCat(bytes, *got));
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
