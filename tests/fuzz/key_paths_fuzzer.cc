// libFuzzer target: key paths and watch resume revisions, straight into the core's
// key-value store, with PyTorch's store calls (compare-and-set, append, erase, queues, and
// the waits that park), and the request ids and records of KV-9. The input is a sequence of
// operations: an op byte, then a 1-byte key length and the key's bytes, then (for writes) a 1-byte
// value length and the value, or (for watches and counts) 8 bytes. Every key goes through
// normalisation and the store's checks; every watch's events are taken. Whatever the bytes: clear
// errors, no crash, the store's books stay consistent and no parked call outlives the input
// (checked after each).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "service/core/key_value_store.h"
#include "service/core/parked_call.h"
#include "service/core/requests.h"
#include "service/core/timer_queue.h"

namespace {

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return size_ == 0; }
  uint8_t Byte() {
    if (size_ == 0) return 0;
    --size_;
    return *data_++;
  }
  std::string Bytes(size_t n) {
    n = n < size_ ? n : size_;
    std::string out(reinterpret_cast<const char*>(data_), n);
    data_ += n;
    size_ -= n;
    return out;
  }
  int64_t Int64() {
    std::string b = Bytes(8);
    b.resize(8, '\0');
    int64_t v;
    std::memcpy(&v, b.data(), 8);
    return v;
  }

 private:
  const uint8_t* data_;
  size_t size_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cohort::KeyValueLimits limits;
  limits.max_key_bytes = 64;
  limits.max_value_bytes = 64;
  limits.max_total_bytes = 4096;
  cohort::ParkedCallRegistry parked(cohort::ParkLimits{});
  cohort::TimerQueue timers;
  cohort::KeyValueStore store(limits, &parked, &timers);
  std::vector<std::shared_ptr<cohort::KeyWatch>> watches;
  Reader in(data, size);
  while (!in.empty()) {
    const uint8_t op = in.Byte();
    const std::string key = in.Bytes(in.Byte());
    switch (op % 16) {
      case 0:
        (void)store.Insert(key, in.Bytes(in.Byte()), /*allow_overwrite=*/op & 0x80);
        break;
      case 1:
        (void)store.TryGet(key);
        break;
      case 2:
        (void)store.GetDir(key);
        break;
      case 3:
        (void)store.Delete(key);
        break;
      case 4:
        (void)store.Increment(key, in.Int64());
        break;
      case 5: {
        auto watch = store.Watch(key, in.Int64(), parked.NextId(), [] {});
        if (watch.ok()) watches.push_back(*watch);
        break;
      }
      case 6:
        (void)cohort::KeyValueStore::NormalizeKey(key);
        break;
      // PyTorch's store calls (service/torch), parked ones included.
      case 7: {
        std::string expected = in.Bytes(in.Byte());
        (void)store.CompareAndSet(key, expected, in.Bytes(in.Byte()));
        break;
      }
      case 8:
        (void)store.Append(key, in.Bytes(in.Byte()));
        break;
      case 9:
        (void)store.Erase(key);
        break;
      case 10:
        (void)store.QueuePush(key, in.Bytes(in.Byte()));
        break;
      case 11:
        (void)store.QueuePop(key);
        break;
      case 12:
        store.WaitQueue(key, parked.NextId(), std::nullopt, std::nullopt, [](absl::Status) {});
        break;
      case 13:
        store.WaitAtLeast(key, in.Int64(), parked.NextId(), std::nullopt, std::nullopt,
                          [](absl::Status) {});
        break;
      case 14: {
        // A request id as the cohort-request metadata brings it (the key's raw bytes).
        auto id = cohort::ParseRequestId(key);
        if (id.ok()) {
          auto again = cohort::ParseRequestId(cohort::FormatRequestId(*id));
          if (!again.ok() || again->session != id->session || again->seq != id->seq ||
              again->low != id->low || id->seq == 0 || id->low > id->seq) {
            std::abort();
          }
        }
        break;
      }
      case 15: {
        // A request record's value, as a user could have overwritten it.
        cohort::RequestRecord record = cohort::RequestRecord::Parse(in.Bytes(in.Byte()));
        record.Forget(static_cast<uint64_t>(in.Int64()));
        const std::string text = record.Serialize();
        if (cohort::RequestRecord::Parse(text).Serialize() != text) std::abort();
        break;
      }
    }
    for (auto& watch : watches) (void)watch->Take(1024);
  }
  if (store.NumBytes() > limits.max_total_bytes) std::abort();
  size_t bytes = 0;
  std::vector<cohort::DurableKey> keys;
  int64_t revision = 0;
  store.Capture(&keys, &revision);
  for (const auto& k : keys) {
    if (cohort::KeyValueStore::NormalizeKey(k.key) != k.key) std::abort();
    bytes += k.key.size() + k.value.size();
  }
  if (bytes != store.NumBytes() || keys.size() != store.NumKeys()) std::abort();
  parked.CancelAll(absl::CancelledError("input over"));
  for (int k = 0; k < cohort::kNumParkKinds; ++k) {
    if (parked.Count(static_cast<cohort::ParkKind>(k)) != 0) std::abort();
  }
  return 0;
}
