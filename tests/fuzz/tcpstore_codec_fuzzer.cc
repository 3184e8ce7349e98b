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
// answers once (a wait once cancelled), and the second changes nothing.
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
  Forward(std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
  return 0;
}
