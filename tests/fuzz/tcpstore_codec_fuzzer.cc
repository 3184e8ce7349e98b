// libFuzzer target: PyTorch's TCPStore wire protocol (service/torch/tcpstore_codec), the bytes a
// client sends. The input's first byte picks how the rest is cut into reads (1 to 128 bytes
// each) and whether a VALIDATE goes first (so that most inputs reach the other commands); the
// rest is the stream. Limits are small, so inputs reach them.
//
// Whatever the bytes: decoding never crashes, leaks or reads out of bounds (ASan, UBSan); the
// stream decoded in pieces gives the same commands and the same error as decoded at once; and
// each command encoded again decodes to itself.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "service/torch/tcpstore_codec.h"

namespace {

using cohort::torch::Command;
using cohort::torch::CommandDecoder;

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

// The commands of `stream` read `piece` bytes at a time, and the error that ended them.
std::vector<Command> Decode(const std::string& stream, size_t piece, absl::Status* error) {
  CommandDecoder decoder(SmallLimits());
  std::vector<Command> out;
  for (size_t at = 0; at < stream.size(); at += piece) {
    decoder.Feed(absl::string_view(stream).substr(at, piece));
    for (;;) {
      absl::StatusOr<std::optional<Command>> next = decoder.Next();
      if (!next.ok()) {
        *error = next.status();
        return out;
      }
      if (!next->has_value()) break;
      out.push_back(std::move(**next));
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = 1 + (data[0] & 0x7f);
  const Command validate{cohort::torch::Query::kValidate, {}, {}, cohort::torch::kValidationMagic};
  std::string stream = (data[0] & 0x80) != 0 ? "" : cohort::torch::EncodeCommand(validate);
  stream.append(reinterpret_cast<const char*>(data) + 1, size - 1);

  absl::Status in_pieces_error, at_once_error;
  std::vector<Command> in_pieces = Decode(stream, piece, &in_pieces_error);
  std::vector<Command> at_once = Decode(stream, stream.size() + 1, &at_once_error);
  if (in_pieces.size() != at_once.size() || in_pieces_error != at_once_error) std::abort();
  for (size_t i = 0; i < at_once.size(); ++i) {
    if (!Same(in_pieces[i], at_once[i])) std::abort();
    if (at_once[i].query == cohort::torch::Query::kValidate) continue;
    absl::Status error;
    std::vector<Command> again =
        Decode(cohort::torch::EncodeCommand(validate) + cohort::torch::EncodeCommand(at_once[i]),
               1 << 20, &error);
    if (!error.ok() || again.size() != 2 || !Same(again[1], at_once[i])) std::abort();
  }
  return 0;
}
