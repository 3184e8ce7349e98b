#include "service/core/requests.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace cohort {

absl::StatusOr<RequestId> ParseRequestId(absl::string_view text) {
  auto bad = [text](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("metadata ", kRequestMetadataKey, " \"",
                                                   text.substr(0, 100), "\": ", why,
                                                   " (it must be SESSION/SEQ/LOW)"));
  };
  std::vector<absl::string_view> parts = absl::StrSplit(text, '/');
  if (parts.size() != 3) return bad("not three parts");
  RequestId id;
  if (parts[0].empty() || parts[0].size() > 32 ||
      parts[0].find_first_not_of("0123456789abcdef") != absl::string_view::npos) {
    return bad("the session is not 1 to 32 lowercase hex digits");
  }
  id.session = std::string(parts[0]);
  if (!absl::SimpleAtoi(parts[1], &id.seq) || id.seq == 0) {
    return bad("the sequence number is not a whole number above 0");
  }
  if (!absl::SimpleAtoi(parts[2], &id.low) || id.low > id.seq) {
    return bad("the low mark is not a whole number at most the sequence number");
  }
  return id;
}

std::string FormatRequestId(const RequestId& id) {
  return absl::StrCat(id.session, "/", id.seq, "/", id.low);
}

std::string RequestRecordKey(absl::string_view session) {
  return absl::StrCat("cohort-requests/", session);
}

RequestRecord RequestRecord::Parse(absl::string_view value) {
  RequestRecord record;
  for (absl::string_view line : absl::StrSplit(value, '\n', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> fields = absl::StrSplit(line, ' ');
    uint64_t seq = 0;
    if (absl::SimpleAtoi(fields.first, &seq)) record.Add(seq, std::string(fields.second));
  }
  return record;
}

void RequestRecord::Forget(uint64_t low) {
  answers_.erase(answers_.begin(), answers_.lower_bound(low));
}

std::optional<std::string> RequestRecord::Find(uint64_t seq) const {
  auto it = answers_.find(seq);
  if (it == answers_.end()) return std::nullopt;
  return it->second;
}

void RequestRecord::Add(uint64_t seq, std::string answer) {
  answers_[seq] = std::move(answer);
  while (answers_.size() > kMaxAnswers) answers_.erase(answers_.begin());
}

std::string RequestRecord::Serialize() const {
  std::string out;
  for (const auto& [seq, answer] : answers_) absl::StrAppend(&out, seq, " ", answer, "\n");
  return out;
}

}  // namespace cohort
