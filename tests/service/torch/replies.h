// Reply bytes as torch's server writes them, for the TCPStore tests to compare against.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "service/torch/tcpstore_codec.h"

namespace cohort::torch::testing {

// A length-prefixed value (GET, COMPARE_SET, MULTI_GET, QUEUE_POP's item).
inline std::string Bytes(absl::string_view s) {
  std::string out;
  AppendBytes(s, &out);
  return out;
}

// An i64 (ADD, DELETE_KEY, GETNUMKEYS, QUEUE_LEN, QUEUE_POP's length).
inline std::string I64(int64_t v) {
  std::string out;
  AppendI64(v, &out);
  return out;
}

// One byte (CHECK, WAIT, CANCEL_WAIT, BARRIER).
inline std::string Byte(uint8_t b) { return std::string(1, static_cast<char>(b)); }

}  // namespace cohort::torch::testing
