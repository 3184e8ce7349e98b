#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "service/core/key_value_store.h"
#include "service/core/requests.h"

namespace cohort {

// The key-value changes that a sidecar's proxy may send more than once (after an outage of
// the coordinator), carried out once per request id: an attempt of a request already carried
// out gets the answer of its first attempt and changes nothing. What was answered is kept
// with the change, in one batch of the store (one record of the state log), in the key
// RequestRecordKey(request.session) (requests.h). Thread-safe as the store is: each call is
// one KeyValueStore::Atomically.
class KeyValueOnce {
 public:
  explicit KeyValueOnce(KeyValueStore* store) : store_(store) {}

  // KeyValueStore::Insert and Increment, once per `request`.
  absl::Status Insert(const RequestId& request, absl::string_view key, std::string value,
                      bool allow_overwrite);
  absl::StatusOr<int64_t> Increment(const RequestId& request, absl::string_view key, int64_t delta);

 private:
  KeyValueStore* const store_;
};

}  // namespace cohort
