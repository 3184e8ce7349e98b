#pragma once
// The commands of a TCPStore byte stream, fed to one decoder a piece at a time: shared by the
// codec's tests and its fuzzer.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "service/torch/tcpstore_codec.h"

namespace cohort::torch::testing {

// Decodes `bytes` fed `piece` bytes at a time; stops at the first error, which it returns in
// `error` (OK when there was none).
inline std::vector<Command> DecodeAll(const std::string& bytes, size_t piece, absl::Status* error,
                                      CodecLimits limits = {}) {
  CommandDecoder decoder(limits);
  std::vector<Command> out;
  *error = absl::OkStatus();
  for (size_t at = 0; at < bytes.size(); at += piece) {
    decoder.Feed(absl::string_view(bytes).substr(at, piece));
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

}  // namespace cohort::torch::testing
