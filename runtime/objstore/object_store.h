#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/objstore/object_bytes.h"
#include "runtime/scheduler/ids.h"

namespace cohort::runtime {

// A value as a store keeps it: the serialized cohort.runtime.v1.Obj (metadata_offset 0), or
// another layout that says where its metadata starts.
struct StoredObject {
  std::shared_ptr<const ObjectBytes> data;
  uint64_t metadata_offset = 0;
};

// One node's objects, in memory, under a byte capacity. No transport: the ObjStore and
// LocalStore services (object_store_service.h) put it on the wire. Thread-safe.
class ObjectStore {
 public:
  explicit ObjectStore(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

  // Sets room aside for an object of `size` bytes before its bytes arrive: RESOURCE_EXHAUSTED
  // when it does not fit (nothing is evicted: every object here is still referenced).
  absl::Status Reserve(ObjectId id, uint64_t size);
  // Gives back a reservation whose object never came.
  void Unreserve(uint64_t size);
  // Stores a reserved object. Storing an id again replaces it (a rebuilt task's result).
  void Commit(ObjectId id, StoredObject object, uint64_t reserved);
  // Reserve and Commit at once.
  absl::Status Put(ObjectId id, std::string data, uint64_t metadata_offset);

  // The object, or the object `id` is an alias of. NOT_FOUND when not here.
  absl::StatusOr<StoredObject> Get(ObjectId id) const;
  // Waits until Get would succeed, or `deadline` (DEADLINE_EXCEEDED), or Close (CANCELLED).
  absl::StatusOr<StoredObject> WaitFor(ObjectId id, absl::Time deadline) const;
  bool Contains(ObjectId id) const;
  // Waits until at least `count` of `ids` are here, or `deadline`; those that are, in order.
  std::vector<ObjectId> WaitForAny(const std::vector<ObjectId>& ids, size_t count,
                                   absl::Time deadline) const;

  void Alias(ObjectId alias, ObjectId canonical);
  // Forgets the object and every alias of it here.
  void Deallocate(ObjectId canonical);
  // Ends every wait.
  void Close();
  // Forgets every object.
  void Clear();

  std::vector<ObjectId> Ids() const;
  uint64_t bytes() const;
  uint64_t capacity() const { return capacity_; }

 private:
  ObjectId Resolve(ObjectId id) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const uint64_t capacity_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<ObjectId, StoredObject> objects_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ObjectId, ObjectId> aliases_ ABSL_GUARDED_BY(mu_);
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;  // stored and reserved bytes
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cohort::runtime
