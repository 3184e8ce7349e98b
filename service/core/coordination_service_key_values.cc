// CoordinationService: the key-value calls. The store keeps its own lock, so that reads of
// large directories never hold up heartbeats or barriers; these calls are here so that
// every change to the service's state, keys included, enters through the service.
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "service/core/coordination_service.h"

namespace cohort {

namespace {

// Carries out `call` once per `request`, in one batch with the request's record: `call`
// answers (OK with the text to keep) or refuses (nothing kept, so an attempt again tries
// again); `answered` gets the kept text of an attempt already carried out.
void OnceInBatch(KeyValueStore::Batch& kv, const RequestId& request,
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

absl::Status CoordinationService::InsertKeyValue(absl::string_view key, std::string value,
                                                 bool allow_overwrite) {
  return key_values_.Insert(key, std::move(value), allow_overwrite);
}

void CoordinationService::GetKeyValue(absl::string_view key, WaiterId waiter,
                                      std::optional<TaskName> owner,
                                      std::optional<absl::Time> deadline,
                                      KeyValueStore::GetDone done, ParkKind kind) {
  key_values_.Get(key, waiter, std::move(owner), deadline, std::move(done), kind);
}

absl::StatusOr<std::string> CoordinationService::TryGetKeyValue(absl::string_view key) const {
  return key_values_.TryGet(key);
}

absl::StatusOr<int64_t> CoordinationService::IncrementKeyValue(absl::string_view key,
                                                               int64_t delta) {
  return key_values_.Increment(key, delta);
}

absl::Status CoordinationService::InsertKeyValueOnce(const RequestId& request,
                                                     absl::string_view key, std::string value,
                                                     bool allow_overwrite) {
  absl::Status result;
  key_values_.Atomically([&](KeyValueStore::Batch& kv) {
    OnceInBatch(
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

absl::StatusOr<int64_t> CoordinationService::IncrementKeyValueOnce(const RequestId& request,
                                                                   absl::string_view key,
                                                                   int64_t delta) {
  absl::StatusOr<int64_t> result;
  key_values_.Atomically([&](KeyValueStore::Batch& kv) {
    OnceInBatch(
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

std::vector<KeyValueEntry> CoordinationService::GetKeyValueDir(absl::string_view dir) const {
  return key_values_.GetDir(dir);
}

absl::Status CoordinationService::DeleteKeyValue(absl::string_view key) {
  return key_values_.Delete(key);
}

std::vector<std::string> CoordinationService::KeyValueKeys(absl::string_view dir) const {
  return key_values_.KeysUnder(dir);
}

size_t CoordinationService::CountKeyValues(absl::string_view dir) const {
  return key_values_.CountUnder(dir);
}

absl::StatusOr<std::optional<std::string>> CoordinationService::CompareAndSetKeyValue(
    absl::string_view key, absl::string_view expected, std::string desired) {
  return key_values_.CompareAndSet(key, expected, std::move(desired));
}

absl::Status CoordinationService::AppendKeyValue(absl::string_view key, absl::string_view data) {
  return key_values_.Append(key, data);
}

absl::StatusOr<bool> CoordinationService::EraseKeyValue(absl::string_view key) {
  return key_values_.Erase(key);
}

absl::Status CoordinationService::QueuePushKeyValue(absl::string_view dir, std::string value) {
  return key_values_.QueuePush(dir, std::move(value));
}

absl::StatusOr<KeyValueStore::Popped> CoordinationService::QueuePopKeyValue(absl::string_view dir) {
  return key_values_.QueuePop(dir);
}

void CoordinationService::KeyValueAtomically(
    const std::function<void(KeyValueStore::Batch&)>& body) {
  key_values_.Atomically(body);
}

size_t CoordinationService::QueueLengthKeyValue(absl::string_view dir) const {
  return key_values_.QueueLength(dir);
}

void CoordinationService::PassQueueWake(absl::string_view dir) { key_values_.PassQueueWake(dir); }

void CoordinationService::WaitKeyValueQueue(absl::string_view dir, WaiterId waiter,
                                            std::optional<TaskName> owner,
                                            std::optional<absl::Time> deadline,
                                            KeyValueStore::ReachedDone done, ParkKind kind) {
  key_values_.WaitQueue(dir, waiter, std::move(owner), deadline, std::move(done), kind);
}

void CoordinationService::WaitKeyValueOrQueue(absl::string_view key, absl::string_view dir,
                                              WaiterId waiter, std::optional<TaskName> owner,
                                              std::optional<absl::Time> deadline,
                                              KeyValueStore::ReachedDone done, ParkKind kind) {
  key_values_.WaitKeyOrQueue(key, dir, waiter, std::move(owner), deadline, std::move(done), kind);
}

void CoordinationService::WaitKeyValueAtLeast(absl::string_view key, int64_t threshold,
                                              WaiterId waiter, std::optional<TaskName> owner,
                                              std::optional<absl::Time> deadline,
                                              KeyValueStore::ReachedDone done, ParkKind kind) {
  key_values_.WaitAtLeast(key, threshold, waiter, std::move(owner), deadline, std::move(done),
                          kind);
}

absl::StatusOr<std::shared_ptr<KeyWatch>> CoordinationService::WatchKeys(
    absl::string_view key, int64_t start_revision, WaiterId waiter, std::function<void()> notify) {
  return key_values_.Watch(key, start_revision, waiter, std::move(notify));
}

KeyValueStore::Stats CoordinationService::KeyValueStats() const { return key_values_.GetStats(); }

}  // namespace cohort
