// The state files' format: CRC-32 frames, reading and writing them, headers and file names.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "service/state/state_store_internal.h"

namespace cohort::state_store_internal {

namespace {

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t GetU32(const unsigned char* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}
uint32_t Crc(absl::string_view data) {
  // zlib takes lengths as uInt; records above 4 GiB are refused before this.
  return static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0),
                                     reinterpret_cast<const Bytef*>(data.data()),
                                     static_cast<uInt>(data.size())));
}

}  // namespace

std::string Errno(absl::string_view what, const std::string& path) {
  return absl::StrCat(what, " ", path, ": ", std::strerror(errno));
}

void AppendFrame(const google::protobuf::MessageLite& message, std::string* out) {
  std::string payload = message.SerializeAsString();
  PutU32(out, static_cast<uint32_t>(payload.size()));
  PutU32(out, Crc(payload));
  out->append(payload);
}

bool WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

FrameReader::~FrameReader() {
  if (file_) std::fclose(file_);
}

absl::Status FrameReader::Open() {
  file_ = std::fopen(path_.c_str(), "rb");
  if (!file_) return absl::FailedPreconditionError(Errno("cannot open", path_));
  struct stat st {};
  if (::fstat(::fileno(file_), &st) != 0) {
    return absl::FailedPreconditionError(Errno("cannot stat", path_));
  }
  size_ = st.st_size;
  return absl::OkStatus();
}

absl::StatusOr<FrameReader::Result> FrameReader::Next(std::string* payload) {
  frame_start_ = offset_;
  unsigned char head[8];
  size_t got = std::fread(head, 1, sizeof head, file_);
  offset_ += static_cast<int64_t>(got);
  if (got == 0 && std::feof(file_)) return Result::kEnd;
  if (got < sizeof head) return Short();
  uint32_t length = GetU32(head);
  uint32_t crc = GetU32(head + 4);
  if (length == 0) {
    // No frame is empty (every record and header has a field), so zeros here are not one.
    absl::StatusOr<bool> zeros = RestIsZero();
    if (!zeros.ok()) return zeros.status();
    if (crc == 0 && *zeros) {
      tail_is_zeros_ = true;
      return Torn("it is zeros from here to its end");
    }
    return Damaged("a record of length 0");
  }
  if (length >= kMaxFrame) {
    return Damaged(absl::StrCat("a record claims a length of ", length, " bytes"));
  }
  // A length past the end of the file is a write cut short, not a reason to allocate it.
  if (length > size_ - offset_) {
    offset_ = size_;
    return Torn("it ends inside a record");
  }
  payload->resize(length);
  got = std::fread(payload->data(), 1, length, file_);
  offset_ += static_cast<int64_t>(got);
  if (got < length) return Short();
  if (Crc(*payload) != crc) {
    // A sector of the frame that is all zeros was never written: a torn write, not damage.
    const std::string frame =
        std::string(reinterpret_cast<const char*>(head), sizeof head) + *payload;
    for (int64_t at = frame_start_; at < offset_;) {
      const int64_t end = std::min(offset_, (at / kSectorBytes + 1) * kSectorBytes);
      const absl::string_view part(frame.data() + (at - frame_start_),
                                   static_cast<size_t>(end - at));
      if (std::all_of(part.begin(), part.end(), [](char c) { return c == 0; })) {
        return Torn(
            absl::StrCat("a record whose bytes ", at, " to ", end, " are zeros, never written"));
      }
      at = end;
    }
    return Damaged("a record's checksum does not match its contents");
  }
  return Result::kFrame;
}

absl::StatusOr<FrameReader::Result> FrameReader::Torn(std::string why) {
  torn_why_ = std::move(why);
  return Result::kTorn;
}

absl::StatusOr<bool> FrameReader::RestIsZero() {
  char buffer[64 * 1024];
  for (;;) {
    const size_t got = std::fread(buffer, 1, sizeof buffer, file_);
    offset_ += static_cast<int64_t>(got);
    if (!std::all_of(buffer, buffer + got, [](char c) { return c == 0; })) return false;
    if (got < sizeof buffer) break;
  }
  if (std::ferror(file_)) {
    return absl::DataLossError(absl::StrCat("cannot read ", path_, ": ", std::strerror(errno)));
  }
  return true;
}

absl::Status FrameReader::Damaged(absl::string_view what) const {
  return absl::DataLossError(absl::StrCat(path_, " is damaged at byte ", frame_start_, ": ", what));
}

absl::StatusOr<FrameReader::Result> FrameReader::Short() {
  if (std::ferror(file_)) {
    return absl::DataLossError(absl::StrCat("cannot read ", path_, ": ", std::strerror(errno)));
  }
  return Torn("it ends inside a record");
}

std::optional<int64_t> Generation(absl::string_view name, absl::string_view prefix) {
  if (!absl::ConsumePrefix(&name, prefix)) return std::nullopt;
  int64_t g = 0;
  if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit) ||
      !absl::SimpleAtoi(name, &g) || g <= 0) {
    return std::nullopt;
  }
  return g;
}

absl::Status SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(Errno("cannot open", dir));
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return absl::InternalError(Errno("cannot sync", dir));
  return absl::OkStatus();
}

std::string BootId(const StateStoreOptions& options) {
  if (!options.boot_id.empty()) return options.boot_id;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

absl::StatusOr<pb::Header> ReadHeader(FrameReader& reader, pb::Header::Kind kind,
                                      int64_t generation) {
  std::string payload;
  auto r = reader.Next(&payload);
  if (!r.ok()) return r.status();
  pb::Header header;
  if (*r != FrameReader::Result::kFrame || !header.ParseFromString(payload)) {
    return reader.Damaged("its header is missing or unreadable");
  }
  if (header.format() != kFormat) {
    return absl::FailedPreconditionError(absl::StrCat(reader.path(), " has format ",
                                                      header.format(),
                                                      "; this coordinator reads format ", kFormat));
  }
  if (header.kind() != kind || static_cast<int64_t>(header.generation()) != generation) {
    return reader.Damaged("its header does not match its name");
  }
  return header;
}

}  // namespace cohort::state_store_internal
