// libFuzzer target: PyTorch's TCPStore wire protocol (service/torch/tcpstore_codec), the bytes a
// client sends. The input's first byte picks how the rest is cut into reads (1 to 128 bytes
// each) and whether a VALIDATE goes first (so that most inputs reach the other commands); the
// rest is the stream. Limits are small, so inputs reach them.
//
// Whatever the bytes: decoding never crashes, leaks or reads out of bounds (ASan, UBSan); the
// stream decoded in pieces gives the same commands and the same error as decoded at once; and
// each command encoded again decodes to itself. Then the commands are carried out by two
// sessions on a real coordination core, one command to one and the next to the other (so
// that one's writes and pushes end the other's waits), each in the same pieces: no crash,
// and once both connections close no wait of theirs is left parked. And the same bytes, less
// the VALIDATE, go to the coordinator as one forwarded request (cohort.v1 TorchStore, a
// sidecar's), twice, as a sidecar sends a request again whose answer it lost: each attempt
// answers once (a wait once cancelled), and the second changes nothing; and as a batch of two
// clients' commands (cohort.v1 TorchStoreBatch), twice likewise (ForwardBatch).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "service/core/coordination_service.h"
#include "service/torch/forwarded_commands.h"
#include "service/torch/tcpstore_codec.h"
#include "service/torch/torch_store_session.h"
#include "tests/service/torch/decode_all.h"

namespace {

using cohort::torch::Command;
using cohort::torch::testing::DecodeAll;

cohort::torch::CodecLimits SmallLimits() {
  cohort::torch::CodecLimits limits;
  limits.max_key_bytes = 64;
  limits.max_value_bytes = 256;
  limits.max_keys = 16;
  limits.max_command_bytes = 4096;
  return limits;
}

bool Same(const Command& a, const Command& b) {
  return a.query == b.query && a.keys == b.keys && a.values == b.values && a.number == b.number;
}

// A coordination core with limits small enough for inputs to reach.
std::unique_ptr<cohort::CoordinationService> SmallService(cohort::Clock* clock) {
  cohort::ServiceConfig config;
  config.jobs.push_back({"worker", 1});
  config.key_value.max_key_bytes = 96;
  config.key_value.max_total_bytes = 1 << 16;
  auto service = cohort::CoordinationService::Create(config, clock);
  if (!service.ok()) std::abort();
  return std::move(*service);
}

// Once every connection or call is done, no wait of theirs may be left parked.
void AbortIfAWaitIsParked(cohort::CoordinationService& service) {
  if (service.ParkedCalls(cohort::ParkKind::kTorchStoreWait) != 0) std::abort();
}

// The commands to two sessions in turn, each sent in pieces; aborts if a wait outlives its
// connection.
void Execute(const std::vector<Command>& commands, size_t piece) {
  cohort::ManualClock clock;
  std::unique_ptr<cohort::CoordinationService> service = SmallService(&clock);
  std::vector<std::shared_ptr<cohort::torch::TorchStoreSession>> sessions;
  for (int i = 0; i < 2; ++i) {
    sessions.push_back(std::make_shared<cohort::torch::TorchStoreSession>(
        service.get(), SmallLimits(), [](const std::string&) {}, [](const absl::Status&) {}));
  }
  const Command validate{cohort::torch::Query::kValidate, {}, {}, cohort::torch::kValidationMagic};
  for (auto& session : sessions) session->Received(cohort::torch::EncodeCommand(validate));
  for (size_t i = 0; i < commands.size(); ++i) {
    if (commands[i].query == cohort::torch::Query::kValidate) continue;
    const std::string bytes = cohort::torch::EncodeCommand(commands[i]);
    for (size_t at = 0; at < bytes.size(); at += piece) {
      sessions[i % 2]->Received(absl::string_view(bytes).substr(at, piece));
    }
  }
  for (auto& session : sessions) session->Closed();
  AbortIfAWaitIsParked(*service);
}

void Forward(const std::string& bytes) {
  cohort::ManualClock clock;
  std::unique_ptr<cohort::CoordinationService> service = SmallService(&clock);
  cohort::torch::ForwardedCommands forwarded(service.get(), SmallLimits());
  cohort::ForwardedTorchCommand request;
  request.client = "sidecar-0.1";
  request.sequence = 1;
  request.command = bytes;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int64_t before = service->KeyValueStats().revision;
    const cohort::WaiterId waiter = service->NewWaiterId();
    int answers = 0;
    forwarded.Execute(waiter, request,
                      [&answers](const absl::StatusOr<std::string>&) { ++answers; });
    if (answers == 0) forwarded.Cancel(waiter, absl::CancelledError("the client went away"));
    if (answers != 1) std::abort();
    if (attempt == 1 && service->KeyValueStats().revision != before) std::abort();
  }
  AbortIfAWaitIsParked(*service);
}

// The commands as one batch of two clients' (cohort.v1 TorchStoreBatch, a sidecar's command
// stream), each command an entry, the writes of a client in a row one entry, and the raw bytes
// as a last entry when the first byte says so (mostly refused whole); twice, as a request whose
// answer was lost: each attempt answers each entry, or refuses the whole request with nothing
// changed; the second changes nothing when the first refused no entry.
void ForwardBatch(const std::vector<Command>& commands, const std::string& raw, bool with_raw) {
  using cohort::torch::Query;
  cohort::ManualClock clock;
  std::unique_ptr<cohort::CoordinationService> service = SmallService(&clock);
  cohort::torch::ForwardedCommands forwarded(service.get(), SmallLimits());
  std::vector<cohort::ForwardedTorchCommand> entries;
  uint64_t next[2] = {1, 1};
  for (size_t i = 0; i < commands.size(); ++i) {
    const Query query = commands[i].query;
    if (query == Query::kValidate || query == Query::kCancelWait || query == Query::kWait ||
        query == Query::kBarrier) {
      continue;
    }
    const int client = static_cast<int>(i % 2);
    const std::string name = client == 0 ? "a" : "b";
    const bool changes = cohort::torch::ChangesStore(query);
    if (cohort::torch::AnswersNothing(query) && !entries.empty() && entries.back().client == name &&
        cohort::torch::AnswersNothing(static_cast<Query>(entries.back().command[0]))) {
      entries.back().command += cohort::torch::EncodeCommand(commands[i]);
      ++next[client];
      continue;
    }
    cohort::ForwardedTorchCommand& entry = entries.emplace_back();
    entry.client = name;
    entry.sequence = changes ? next[client]++ : 0;
    entry.command = cohort::torch::EncodeCommand(commands[i]);
  }
  if (with_raw) {
    cohort::ForwardedTorchCommand& entry = entries.emplace_back();
    entry.client = "c";
    entry.sequence = 1;
    entry.command = raw;
  }
  const int64_t start = service->KeyValueStats().revision;
  bool refused_one = false;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int64_t before = service->KeyValueStats().revision;
    auto results = forwarded.ExecuteBatch(entries);
    if (!results.ok()) {
      if (results.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
      if (service->KeyValueStats().revision != start) std::abort();  // nothing changed
      continue;
    }
    if (results->size() != entries.size()) std::abort();
    for (const auto& r : *results) refused_one = refused_one || !r.ok();
    if (attempt == 1 && !refused_one && service->KeyValueStats().revision != before) std::abort();
  }
  AbortIfAWaitIsParked(*service);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = 1 + (data[0] & 0x7f);
  const Command validate{cohort::torch::Query::kValidate, {}, {}, cohort::torch::kValidationMagic};
  std::string stream = (data[0] & 0x80) != 0 ? "" : cohort::torch::EncodeCommand(validate);
  stream.append(reinterpret_cast<const char*>(data) + 1, size - 1);

  absl::Status in_pieces_error, at_once_error;
  std::vector<Command> in_pieces = DecodeAll(stream, piece, &in_pieces_error, SmallLimits());
  std::vector<Command> at_once =
      DecodeAll(stream, stream.size() + 1, &at_once_error, SmallLimits());
  if (in_pieces.size() != at_once.size() || in_pieces_error != at_once_error) std::abort();
  for (size_t i = 0; i < at_once.size(); ++i) {
    if (!Same(in_pieces[i], at_once[i])) std::abort();
    if (at_once[i].query == cohort::torch::Query::kValidate) continue;
    absl::Status error;
    std::vector<Command> again =
        DecodeAll(cohort::torch::EncodeCommand(validate) + cohort::torch::EncodeCommand(at_once[i]),
                  1 << 20, &error, SmallLimits());
    if (!error.ok() || again.size() != 2 || !Same(again[1], at_once[i])) std::abort();
  }
  Execute(at_once, piece);
  const std::string raw(reinterpret_cast<const char*>(data) + 1, size - 1);
  Forward(raw);
  ForwardBatch(at_once, raw, (size & 1) != 0);
  return 0;
}
