#include "service/torch/tcpstore_codec.h"

#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace cohort::torch {

namespace {

// Reads fields from a command's bytes (after its command byte), from `pos` on. A read past
// their end sets `short_` and `need_`, the bytes the field needs; a field past a limit sets
// `error_`.
class Reader {
 public:
  Reader(absl::string_view bytes, size_t pos, const CodecLimits& limits)
      : bytes_(bytes), limits_(limits), pos_(pos) {}

  template <typename T>
  bool Raw(T* value) {
    if (!Room(sizeof(T))) return false;
    std::memcpy(value, bytes_.data() + pos_, sizeof(T));  // little-endian, as torch sends
    pos_ += sizeof(T);
    return true;
  }

  // A u64 length, then that many bytes, at most `limit` of them.
  bool String(size_t limit, const char* what, std::string* out) {
    uint64_t length = 0;
    if (!Raw(&length)) return false;
    if (length > limit) {
      error_ = absl::ResourceExhaustedError(
          absl::StrCat("a ", what, " of ", length, " bytes (at most ", limit, ")"));
      return false;
    }
    if (!Room(length)) return false;
    out->assign(bytes_.data() + pos_, length);
    pos_ += length;
    return true;
  }
  bool Key(std::string* out) { return String(limits_.max_key_bytes, "key", out); }
  bool Value(std::string* out) { return String(limits_.max_value_bytes, "value", out); }

  // A u64 count of keys, at most max_keys.
  bool Count(uint64_t* n) {
    if (!Raw(n)) return false;
    if (*n > limits_.max_keys) {
      error_ = absl::ResourceExhaustedError(
          absl::StrCat(*n, " keys in one command (at most ", limits_.max_keys, ")"));
      return false;
    }
    return true;
  }

  bool is_short() const { return short_; }
  const absl::Status& error() const { return error_; }
  size_t pos() const { return pos_; }
  size_t need() const { return need_; }

 private:
  // Whether `size` more bytes are here; past max_command_bytes an error.
  bool Room(uint64_t size) {
    if (size > limits_.max_command_bytes || pos_ + 1 + size > limits_.max_command_bytes) {
      error_ = absl::ResourceExhaustedError(
          absl::StrCat("a command of more than ", limits_.max_command_bytes, " bytes"));
      return false;
    }
    if (bytes_.size() - pos_ < size) {
      short_ = true;
      need_ = pos_ + size;
      return false;
    }
    return true;
  }

  absl::string_view bytes_;
  const CodecLimits& limits_;
  size_t pos_;
  bool short_ = false;
  size_t need_ = 0;
  absl::Status error_;
};

bool IsMultiKey(Query q) {
  return q == Query::kCheck || q == Query::kWait || q == Query::kMultiGet || q == Query::kMultiSet;
}

// The keys (and values) of a multi-key command, from where `p` stopped; each whole key (or
// key and value) is kept in `p` as soon as it is decoded.
void MultiKeyFields(Reader& in, CommandDecoder::Partial& p) {
  if (!p.have_count) {
    if (!in.Count(&p.count)) return;
    p.have_count = true;
    p.pos = in.pos();
  }
  Command& c = p.command;
  while (c.keys.size() < p.count) {
    std::string key, value;
    if (!in.Key(&key)) return;
    if (c.query == Query::kMultiSet && !in.Value(&value)) return;
    c.keys.push_back(std::move(key));
    if (c.query == Query::kMultiSet) c.values.push_back(std::move(value));
    p.pos = in.pos();
  }
}

// The fields of any other command, all at once.
void Fields(Reader& in, Command* c) {
  auto key = [&] { return in.Key(&c->keys.emplace_back()); };
  auto value = [&] { return in.Value(&c->values.emplace_back()); };
  switch (c->query) {
    case Query::kValidate:
    case Query::kPing: {
      uint32_t number = 0;
      if (in.Raw(&number)) c->number = number;
      return;
    }
    case Query::kSet:
    case Query::kAppend:
    case Query::kQueuePush:
      if (key()) value();
      return;
    case Query::kCompareSet:
      if (key() && value()) value();
      return;
    case Query::kGet:
    case Query::kDeleteKey:
    case Query::kQueuePop:
    case Query::kQueueLen:
      key();
      return;
    case Query::kAdd:
    case Query::kBarrier:
      if (key()) in.Raw(&c->number);
      return;
    case Query::kGetNumKeys:
    case Query::kCancelWait:
    case Query::kListKeys:
    case Query::kCheck:  // multi-key commands: MultiKeyFields
    case Query::kWait:
    case Query::kMultiGet:
    case Query::kMultiSet:
      return;
  }
}

template <typename T>
void AppendRaw(T value, std::string* out) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out->append(bytes, sizeof(T));
}

}  // namespace

absl::string_view QueryName(Query query) {
  static constexpr absl::string_view kNames[] = {
      "VALIDATE",   "SET",        "COMPARE_SET", "GET",       "ADD",       "CHECK",       "WAIT",
      "GETNUMKEYS", "DELETE_KEY", "APPEND",      "MULTI_GET", "MULTI_SET", "CANCEL_WAIT", "PING",
      "QUEUE_PUSH", "QUEUE_POP",  "QUEUE_LEN",   "LIST_KEYS", "BARRIER"};
  auto index = static_cast<size_t>(query);
  return index < std::size(kNames) ? kNames[index] : "UNKNOWN";
}

absl::StatusOr<std::optional<Command>> CommandDecoder::Next() {
  absl::string_view rest(buffer_.data() + offset_, buffer_.size() - offset_);
  if (rest.empty()) return std::nullopt;
  if (partial_.active && rest.size() < 1 + partial_.need) return std::nullopt;
  if (!partial_.active) {
    auto byte = static_cast<uint8_t>(rest[0]);
    if (byte > kLastQuery) {
      return absl::InvalidArgumentError(absl::StrCat("unknown TCPStore command ", int{byte}));
    }
    auto query = static_cast<Query>(byte);
    if (!validated_ && query != Query::kValidate) {
      return absl::FailedPreconditionError(
          absl::StrCat("the first command was ", QueryName(query),
                       ", not VALIDATE (torch 2.2 or newer sends it first)"));
    }
    if (validated_ && query == Query::kValidate) {
      return absl::InvalidArgumentError("VALIDATE again after the first command");
    }
    partial_ = Partial{};
    partial_.active = true;
    partial_.command.query = query;
  }
  Reader in(rest.substr(1), partial_.pos, limits_);
  Command single;
  Query query = partial_.command.query;
  if (IsMultiKey(query)) {
    MultiKeyFields(in, partial_);
  } else {
    single.query = query;
    Fields(in, &single);
  }
  if (!in.error().ok()) {
    return absl::Status(in.error().code(),
                        absl::StrCat(QueryName(query), ": ", in.error().message()));
  }
  if (in.is_short()) {
    partial_.need = in.need();
    return std::nullopt;
  }
  Command command = IsMultiKey(query) ? std::move(partial_.command) : std::move(single);
  partial_ = Partial{};
  if (query == Query::kValidate) {
    if (static_cast<uint32_t>(command.number) != kValidationMagic) {
      return absl::InvalidArgumentError(
          absl::StrCat("VALIDATE with magic ", command.number, ", not ", kValidationMagic));
    }
    validated_ = true;
  }
  offset_ += 1 + in.pos();
  // Drop what was decoded once it is most of the buffer (a copy of the rest, at most one
  // partial command).
  if (offset_ > buffer_.size() / 2) {
    buffer_.erase(0, offset_);
    offset_ = 0;
  }
  return std::optional<Command>(std::move(command));
}

void AppendU8(uint8_t value, std::string* out) { out->push_back(static_cast<char>(value)); }
void AppendU32(uint32_t value, std::string* out) { AppendRaw(value, out); }
void AppendI64(int64_t value, std::string* out) { AppendRaw(value, out); }
void AppendBytes(absl::string_view bytes, std::string* out) {
  AppendRaw(static_cast<uint64_t>(bytes.size()), out);
  out->append(bytes.data(), bytes.size());
}

bool AnswersNothing(Query query) {
  return query == Query::kSet || query == Query::kMultiSet || query == Query::kAppend ||
         query == Query::kQueuePush;
}

bool ChangesStore(Query query) {
  switch (query) {
    case Query::kSet:
    case Query::kCompareSet:
    case Query::kAdd:
    case Query::kDeleteKey:
    case Query::kAppend:
    case Query::kMultiSet:
    case Query::kQueuePush:
    case Query::kQueuePop:
    case Query::kBarrier:
      return true;
    default:
      return false;
  }
}

std::string EncodeCommand(const Command& c) {
  std::string out;
  AppendU8(static_cast<uint8_t>(c.query), &out);
  auto keys = [&] {
    AppendRaw(static_cast<uint64_t>(c.keys.size()), &out);
    for (const std::string& k : c.keys) AppendBytes(k, &out);
  };
  switch (c.query) {
    case Query::kValidate:
    case Query::kPing:
      AppendU32(static_cast<uint32_t>(c.number), &out);
      break;
    case Query::kAdd:
    case Query::kBarrier:
      AppendBytes(c.keys.at(0), &out);
      AppendI64(c.number, &out);
      break;
    case Query::kCheck:
    case Query::kWait:
    case Query::kMultiGet:
      keys();
      break;
    case Query::kMultiSet:
      AppendRaw(static_cast<uint64_t>(c.keys.size()), &out);
      for (size_t i = 0; i < c.keys.size(); ++i) {
        AppendBytes(c.keys[i], &out);
        AppendBytes(c.values.at(i), &out);
      }
      break;
    case Query::kGetNumKeys:
    case Query::kCancelWait:
    case Query::kListKeys:
      break;
    default:  // a key, then the values
      AppendBytes(c.keys.at(0), &out);
      for (const std::string& v : c.values) AppendBytes(v, &out);
      break;
  }
  return out;
}

}  // namespace cohort::torch
