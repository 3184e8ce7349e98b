#pragma once
// Request ids: a call that a sidecar's proxy may send more than once (its answer lost in an
// outage of the coordinator) carries one, so that the coordinator carries it out once and
// answers every attempt alike.

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cohort {

struct RequestId {
  std::string session;  // of the sending proxy: 1 to 32 of [0-9a-f]
  uint64_t seq = 0;     // at least 1, one per call of the session, rising
  // Every request of the session numbered below it has been answered: forget them.
  uint64_t low = 0;
};

// The gRPC metadata that carries it, "SESSION/SEQ/LOW" (low <= seq).
inline constexpr char kRequestMetadataKey[] = "cohort-request";
absl::StatusOr<RequestId> ParseRequestId(absl::string_view text);
std::string FormatRequestId(const RequestId& id);

// The key that keeps the answers of a session's requests: "cohort-requests/SESSION".
std::string RequestRecordKey(absl::string_view session);

// The answers of a session's requests carried out and not yet forgotten, as its record key
// holds them: one line "SEQ ANSWER" each. At most kMaxAnswers (the oldest go first).
class RequestRecord {
 public:
  static constexpr size_t kMaxAnswers = 4096;
  static RequestRecord Parse(absl::string_view value);  // lines it cannot read are dropped
  void Forget(uint64_t low);                            // answers of requests below `low`
  std::optional<std::string> Find(uint64_t seq) const;
  void Add(uint64_t seq, std::string answer);
  bool empty() const { return answers_.empty(); }
  std::string Serialize() const;

 private:
  std::map<uint64_t, std::string> answers_;
};

}  // namespace cohort
