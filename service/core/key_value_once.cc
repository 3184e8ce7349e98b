#include "service/core/key_value_once.h"

#include <functional>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cohort {

namespace {

// Carries out `call` once per `request`, in one batch with the request's record: `call`
// answers (OK with the text to keep) or refuses (nothing kept, so an attempt again tries
// again); `answered` gets the kept text of an attempt already carried out.
void KeyValueOnceInBatch(KeyValueStore::Batch& kv, const RequestId& request,
                         const std::function<absl::StatusOr<std::string>()>& call,
                         const std::function<void(const std::string&)>& answered) {
  const std::string record_key = RequestRecordKey(request.session);
  absl::StatusOr<std::string> stored = kv.TryGet(record_key);
  RequestRecord record = RequestRecord::Parse(stored.ok() ? *stored : "");
  record.Forget(request.low);
  if (std::optional<std::string> answer = record.Find(request.seq)) {
    answered(*answer);
  } else if (absl::StatusOr<std::string> kept = call(); kept.ok()) {
    record.Add(request.seq, *std::move(kept));
  }
  if (record.empty()) {
    if (stored.ok()) (void)kv.Erase(record_key);
  } else if (std::string text = record.Serialize(); !stored.ok() || text != *stored) {
    // Refused only by a limit of the store: the call stands, and an attempt again would be
    // carried out again, as without a request id.
    (void)kv.Insert(record_key, std::move(text), /*allow_overwrite=*/true);
  }
}

}  // namespace

absl::Status KeyValueOnce::Insert(const RequestId& request, absl::string_view key,
                                  std::string value, bool allow_overwrite) {
  absl::Status result;
  store_->Atomically([&](KeyValueStore::Batch& kv) {
    KeyValueOnceInBatch(
        kv, request,
        [&]() -> absl::StatusOr<std::string> {
          result = kv.Insert(key, std::move(value), allow_overwrite);
          if (!result.ok()) return result;
          return std::string("ok");
        },
        [&](const std::string&) { result = absl::OkStatus(); });
  });
  return result;
}

absl::StatusOr<int64_t> KeyValueOnce::Increment(const RequestId& request, absl::string_view key,
                                                int64_t delta) {
  absl::StatusOr<int64_t> result;
  store_->Atomically([&](KeyValueStore::Batch& kv) {
    KeyValueOnceInBatch(
        kv, request,
        [&]() -> absl::StatusOr<std::string> {
          result = kv.Increment(key, delta);
          if (!result.ok()) return result.status();
          return absl::StrCat(*result);
        },
        [&](const std::string& answer) {
          int64_t sum = 0;
          if (absl::SimpleAtoi(answer, &sum)) {
            result = sum;
          } else {
            result = absl::InternalError(absl::StrCat("the record of request ", request.seq,
                                                      " holds no number: \"", answer, "\""));
          }
        });
  });
  return result;
}

}  // namespace cohort
