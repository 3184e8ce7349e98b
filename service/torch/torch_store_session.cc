#include "service/torch/torch_store_session.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "service/torch/torch_keys.h"

namespace cohort::torch {

namespace {

// A key the client may read but that is not there reads as an empty value (libuv's answer).
absl::StatusOr<std::string> ValueOrEmpty(CoordinationService* service, absl::string_view key) {
  absl::StatusOr<std::string> value = service->TryGetKeyValue(StoreKey(key));
  if (value.status().code() == absl::StatusCode::kNotFound) return std::string();
  return value;
}

absl::Status WithQuery(const Command& c, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(QueryName(c.query), ": ", s.message()));
}

}  // namespace

absl::StatusOr<std::string> ChangeStore(KeyValueStore::Batch& kv, Command& c) {
  std::string reply;
  switch (c.query) {
    case Query::kSet:
      if (absl::Status s = kv.Insert(StoreKey(c.keys[0]), std::move(c.values[0]),
                                     /*allow_overwrite=*/true);
          !s.ok()) {
        return WithQuery(c, s);
      }
      break;
    case Query::kMultiSet:
      for (size_t i = 0; i < c.keys.size(); ++i) {
        if (absl::Status s = kv.Insert(StoreKey(c.keys[i]), std::move(c.values[i]), true);
            !s.ok()) {
          return WithQuery(c, s);
        }
      }
      break;
    case Query::kCompareSet: {
      absl::StatusOr<std::optional<std::string>> after =
          kv.CompareAndSet(StoreKey(c.keys[0]), c.values[0], std::move(c.values[1]));
      if (!after.ok()) return WithQuery(c, after.status());
      // Absent, and `expected` not empty: torch answers `expected` itself.
      AppendBytes(after->has_value() ? **after : c.values[0], &reply);
      break;
    }
    case Query::kAdd: {
      absl::StatusOr<int64_t> sum = kv.Increment(StoreKey(c.keys[0]), c.number);
      if (!sum.ok()) return WithQuery(c, sum.status());
      AppendI64(*sum, &reply);
      break;
    }
    case Query::kAppend:
      if (absl::Status s = kv.Append(StoreKey(c.keys[0]), c.values[0]); !s.ok()) {
        return WithQuery(c, s);
      }
      break;
    case Query::kDeleteKey: {
      absl::StatusOr<bool> erased = kv.Erase(StoreKey(c.keys[0]));
      if (!erased.ok()) return WithQuery(c, erased.status());
      AppendI64(*erased ? 1 : 0, &reply);
      break;
    }
    case Query::kBarrier:
      if (absl::StatusOr<int64_t> arrived = kv.Increment(StoreKey(c.keys[0]), 1); !arrived.ok()) {
        return WithQuery(c, arrived.status());
      }
      break;
    case Query::kQueuePush:
      if (absl::Status s = kv.QueuePush(QueueKey(c.keys[0]), std::move(c.values[0])); !s.ok()) {
        return WithQuery(c, s);
      }
      break;
    case Query::kQueuePop: {
      absl::StatusOr<KeyValueStore::Popped> popped = kv.QueuePop(QueueKey(c.keys[0]));
      if (!popped.ok()) return WithQuery(c, popped.status());
      AppendI64(popped->length, &reply);
      if (popped->item) AppendBytes(*popped->item, &reply);
      break;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(QueryName(c.query), " does not change the store"));
  }
  return reply;
}

TorchStoreSession::TorchStoreSession(CoordinationService* service, CodecLimits limits, Send send,
                                     End end, TorchStoreMetrics* metrics)
    : service_(service),
      metrics_(metrics),
      decoder_(limits),
      send_(std::move(send)),
      end_(std::move(end)) {}

void TorchStoreSession::Received(absl::string_view bytes) {
  decoder_.Feed(bytes);
  for (;;) {
    {
      // Closed by a failed wait (on another thread), or by a command before this one.
      absl::MutexLock lock(&mu_);
      if (closed_) return;
    }
    absl::StatusOr<std::optional<Command>> next = decoder_.Next();
    absl::Status failed = next.status();
    if (failed.ok()) {
      if (!next->has_value()) return;
      if (metrics_ != nullptr) metrics_->Command((*next)->query);
      failed = Execute(**next);
    }
    if (!failed.ok()) {
      Closed();
      end_(failed);
      return;
    }
  }
}

absl::Status TorchStoreSession::Execute(Command& c) {
  std::string reply;
  switch (c.query) {
    case Query::kValidate:
      return absl::OkStatus();
    case Query::kPing:
      AppendU32(static_cast<uint32_t>(c.number), &reply);
      break;
    case Query::kSet:
    case Query::kMultiSet:
    case Query::kCompareSet:
    case Query::kAdd:
    case Query::kAppend:
    case Query::kDeleteKey:
    case Query::kQueuePush:
    case Query::kQueuePop: {
      absl::StatusOr<std::string> answer;
      service_->KeyValueAtomically([&](KeyValueStore::Batch& kv) { answer = ChangeStore(kv, c); });
      if (!answer.ok()) return answer.status();
      if (answer->empty()) return absl::OkStatus();  // a write torch's server does not answer
      reply = std::move(*answer);
      break;
    }
    case Query::kGet: {
      absl::StatusOr<std::string> value = ValueOrEmpty(service_, c.keys[0]);
      if (!value.ok()) return WithQuery(c, value.status());
      AppendBytes(*value, &reply);
      break;
    }
    case Query::kMultiGet:
      for (const std::string& key : c.keys) {
        absl::StatusOr<std::string> value = ValueOrEmpty(service_, key);
        if (!value.ok()) return WithQuery(c, value.status());
        AppendBytes(*value, &reply);
      }
      break;
    case Query::kCheck: {
      bool all = true;
      for (const std::string& key : c.keys) {
        absl::StatusOr<bool> exists = Exists(key);
        if (!exists.ok()) return WithQuery(c, exists.status());
        if (!*exists) {
          all = false;
          break;
        }
      }
      AppendU8(all ? kCheckReady : kCheckNotReady, &reply);
      break;
    }
    case Query::kGetNumKeys:
      AppendI64(static_cast<int64_t>(service_->CountKeyValues(kTorchKeyDir)), &reply);
      break;
    case Query::kListKeys: {
      std::vector<std::string> keys;
      for (const std::string& stored : service_->KeyValueKeys(kTorchKeyDir)) {
        if (std::optional<std::string> key = TorchKey(stored)) keys.push_back(std::move(*key));
      }
      AppendI64(static_cast<int64_t>(keys.size()), &reply);
      for (const std::string& key : keys) AppendBytes(key, &reply);
      break;
    }
    case Query::kWait:
      StartWait(c.keys, 0);
      return absl::OkStatus();
    case Query::kBarrier: {
      absl::StatusOr<int64_t> arrived = service_->IncrementKeyValue(StoreKey(c.keys[0]), 1);
      if (!arrived.ok()) return WithQuery(c, arrived.status());
      if (*arrived >= c.number) {
        AppendU8(kStopWaiting, &reply);
        break;
      }
      StartWait(c.keys, c.number);
      return absl::OkStatus();
    }
    case Query::kCancelWait: {
      // WAIT_CANCELED goes out in the same hold of the lock that ends the wait, so that a
      // STOP_WAITING the wait sends (under that lock too) comes before it or not at all.
      std::string canceled;
      AppendU8(kWaitCanceled, &canceled);
      CancelWaits("CANCEL_WAIT", std::move(canceled));
      return absl::OkStatus();
    }
    case Query::kQueueLen:
      AppendI64(static_cast<int64_t>(service_->QueueLengthKeyValue(QueueKey(c.keys[0]))), &reply);
      break;
  }
  send_(std::move(reply));
  return absl::OkStatus();
}

absl::StatusOr<bool> TorchStoreSession::Exists(absl::string_view key) const {
  absl::StatusOr<std::string> value = service_->TryGetKeyValue(StoreKey(key));
  if (value.ok()) return true;
  if (value.status().code() != absl::StatusCode::kNotFound) return value.status();
  return service_->QueueLengthKeyValue(QueueKey(key)) > 0;
}

void TorchStoreSession::StartWait(const std::vector<std::string>& keys, int64_t barrier_threshold) {
  CancelWaits("a new WAIT");
  const bool barrier = barrier_threshold > 0;
  std::vector<WaiterId> ids(keys.size());
  for (WaiterId& id : ids) id = service_->NewWaiterId();
  uint64_t seq = 0;
  {
    absl::MutexLock lock(&mu_);
    seq = ++wait_seq_;
    waiting_ = ids;
    remaining_ = keys.size() + 1;  // and this call's own turn, below
  }
  auto self = shared_from_this();
  const size_t max_key_bytes = service_->config().key_value.max_key_bytes;
  for (size_t i = 0; i < keys.size(); ++i) {
    {
      // A key that could not park (too long, the coordinator's limits) ended the wait and the
      // connection.
      absl::MutexLock lock(&mu_);
      if (closed_ || seq != wait_seq_) break;
    }
    if (barrier) {
      service_->WaitKeyValueAtLeast(
          StoreKey(keys[i]), barrier_threshold, ids[i], std::nullopt, std::nullopt,
          [self, seq](const absl::Status& s) { self->WaitEnded(seq, s); },
          ParkKind::kTorchStoreWait);
      continue;
    }
    std::string queue = QueueKey(keys[i]);
    if (queue.size() + kQueueItemSuffixBytes > max_key_bytes) {
      // A name too long for a queue item's key has no queue to wait for.
      service_->GetKeyValue(
          StoreKey(keys[i]), ids[i], std::nullopt, std::nullopt,
          [self, seq](const absl::StatusOr<std::string>& v) { self->WaitEnded(seq, v.status()); },
          ParkKind::kTorchStoreWait);
      continue;
    }
    service_->WaitKeyValueOrQueue(
        StoreKey(keys[i]), queue, ids[i], std::nullopt, std::nullopt,
        [self, seq, queue](const absl::Status& s) {
          // A push that ended this call goes to another waiter if this wait no longer wanted
          // it: the item stays for whoever pops. (After a write of the key, PassQueueWake finds
          // no item, or ends a wait that an item in its queue answers anyway.)
          if (!self->WaitEnded(seq, s) && s.ok()) self->service_->PassQueueWake(queue);
        },
        ParkKind::kTorchStoreWait);
  }
  bool ended = false;
  {
    absl::MutexLock lock(&mu_);
    ended = closed_ || seq != wait_seq_;
  }
  if (ended) {
    // What parked before the wait ended is cancelled (an id not parked is ignored).
    for (WaiterId id : ids) service_->Cancel(id, absl::CancelledError("the wait ended"));
    return;
  }
  WaitEnded(seq, absl::OkStatus());  // this call's own turn
}

bool TorchStoreSession::WaitEnded(uint64_t seq, const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (closed_ || seq != wait_seq_) return false;  // cancelled, or of a wait since replaced
    if (status.ok()) {
      if (--remaining_ == 0) {
        // Over: what its calls still say (the cancellations below) is of a finished wait.
        ++wait_seq_;
        waiting_.clear();
        std::string bytes;
        AppendU8(kStopWaiting, &bytes);
        // Under the lock: after a CANCEL_WAIT (which bumps wait_seq_ under it) nothing is sent.
        send_(std::move(bytes));
      }
      return true;
    }
    closed_ = true;
  }
  // A wait the coordinator could not park (its limits), or the coordinator stopping.
  CancelWaits("the connection closed");
  end_(absl::Status(status.code(), absl::StrCat("WAIT: ", status.message())));
  return true;
}

void TorchStoreSession::CancelWaits(const char* why, std::string reply) {
  std::vector<WaiterId> ids;
  {
    absl::MutexLock lock(&mu_);
    ++wait_seq_;
    ids = std::move(waiting_);
    waiting_.clear();
    remaining_ = 0;
    if (!reply.empty() && !closed_) send_(std::move(reply));
  }
  for (WaiterId id : ids) service_->Cancel(id, absl::CancelledError(why));
}

void TorchStoreSession::Closed() {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
  }
  CancelWaits("the connection closed");
}

}  // namespace cohort::torch
