// PyTorch's TCPStore wire protocol (../shared/docs/tcpstore-protocol.md): the commands a client
// sends, decoded from a byte stream that may split or join them anywhere, and the replies,
// encoded. No sockets and no state: the server (service/torch) feeds it what it reads.
//
// Hand-written: the protocol is torch's own framing (a command byte, then raw little-endian
// integers and length-prefixed strings), which no library outside torch decodes, and torch's
// server is not a library one could link.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cohort::torch {

// The command byte, as torch 2.2 and later number it.
enum class Query : uint8_t {
  kValidate = 0,
  kSet = 1,
  kCompareSet = 2,
  kGet = 3,
  kAdd = 4,
  kCheck = 5,
  kWait = 6,
  kGetNumKeys = 7,
  kDeleteKey = 8,
  kAppend = 9,
  kMultiGet = 10,
  kMultiSet = 11,
  kCancelWait = 12,
  kPing = 13,
  kQueuePush = 14,
  kQueuePop = 15,
  kQueueLen = 16,
  kListKeys = 17,
  kBarrier = 18,
};
inline constexpr uint8_t kLastQuery = 18;
// VALIDATE's magic: a connection whose first command is not VALIDATE with it is closed.
inline constexpr uint32_t kValidationMagic = 0x3C85F7CE;

// The reply bytes of CHECK (READY, NOT_READY) and of WAIT, BARRIER and CANCEL_WAIT.
inline constexpr uint8_t kCheckReady = 0;
inline constexpr uint8_t kCheckNotReady = 1;
inline constexpr uint8_t kStopWaiting = 0;
inline constexpr uint8_t kWaitCanceled = 1;

absl::string_view QueryName(Query query);
// Whether the command changes the store (SET, COMPARE_SET, ADD, DELETE_KEY, APPEND, MULTI_SET,
// QUEUE_PUSH, QUEUE_POP, BARRIER): one that must not be carried out twice.
bool ChangesStore(Query query);
// Whether torch's client sends the command without reading an answer, which its server sends
// none of (SET, MULTI_SET, APPEND, QUEUE_PUSH): a process may send many in a row.
bool AnswersNothing(Query query);

// What one command may carry; past a limit the decoder refuses before it allocates, and the
// server closes the connection (as torch's libuv server does past its own: 8 KiB keys, 8 MiB
// values, 131,072 keys).
struct CodecLimits {
  size_t max_key_bytes = 8192;
  size_t max_value_bytes = size_t{8} << 20;
  size_t max_keys = 131072;
  // All of one command's bytes (a MULTI_SET of many values).
  size_t max_command_bytes = size_t{64} << 20;
};

// One decoded command. Which fields it uses depends on the query:
//   keys        SET, GET, ADD, DELETE_KEY, APPEND, QUEUE_*, BARRIER: one; CHECK, WAIT,
//               MULTI_GET: n; MULTI_SET: n, paired with values; COMPARE_SET: one
//   values      SET, APPEND, QUEUE_PUSH: one; COMPARE_SET: expected, desired; MULTI_SET: n
//   number      ADD: the delta; BARRIER: the world size; VALIDATE: the magic; PING: the nonce
struct Command {
  Query query = Query::kValidate;
  std::vector<std::string> keys;
  std::vector<std::string> values;
  int64_t number = 0;
};

// Decodes the commands of one connection, in order. The first must be VALIDATE with the magic,
// and VALIDATE is valid only there (torch 2.2 and later; 2.1 clients, which number commands
// otherwise, are refused by that rule).
class CommandDecoder {
 public:
  explicit CommandDecoder(CodecLimits limits = {}) : limits_(limits) {}

  // Appends bytes read from the connection.
  void Feed(absl::string_view bytes) { buffer_.append(bytes.data(), bytes.size()); }
  // The next whole command; nullopt while its bytes have not all arrived. An error (an unknown
  // command, a bad first command, a field past a limit) is final: the connection must close.
  absl::StatusOr<std::optional<Command>> Next();
  // Bytes received and not yet decoded.
  size_t buffered() const { return buffer_.size() - offset_; }

  // A command decoded in part, while its bytes arrive: the keys and values of CHECK, WAIT,
  // MULTI_GET and MULTI_SET decoded so far are kept, so a command of many keys arriving in
  // many reads is decoded once, not again from its start after each read.
  struct Partial {
    bool active = false;
    Command command;
    bool have_count = false;
    uint64_t count = 0;
    size_t pos = 0;   // bytes of it decoded into `command` (after the command byte)
    size_t need = 0;  // bytes of it that must be buffered before decoding goes on
  };

 private:
  const CodecLimits limits_;
  std::string buffer_;
  size_t offset_ = 0;
  bool validated_ = false;
  Partial partial_;
};

// Replies, appended to `out`.
void AppendU8(uint8_t value, std::string* out);
void AppendU32(uint32_t value, std::string* out);
void AppendI64(int64_t value, std::string* out);
// A u64 length, then the bytes.
void AppendBytes(absl::string_view bytes, std::string* out);

// Requests, as torch's client encodes them (for tests, benchmarks and the fuzzer's seeds).
std::string EncodeCommand(const Command& command);

}  // namespace cohort::torch
