#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "runtime/scheduler/ids.h"

namespace cohort::runtime {

struct SchedulerChanges;  // scheduler_state.h, which includes this

// One object id. A canonical object has a value (somewhere, some day); an alias reads as its
// target. A record stays after the object is released, as part of the lineage a lost object is
// rebuilt from, until the task that made it leaves the scheduler's history of finished tasks
// (then it is forgotten: Forget).
struct ObjectRecord {
  ObjectId alias_of = 0;
  int64_t refs = 0;
  // The count reached zero and the object was let go (its stores told to drop it).
  bool released = false;
  absl::btree_set<StoreId> locations;
  uint64_t size = 0;
  // Reading the object fails with `error` (its task raised, ran out of retries, or its only
  // copy, a put, was lost).
  bool failed = false;
  std::string error;
  OperationId producer = 0;  // the task that computes it; 0 for a put
  WorkerId put_by = 0;
  std::vector<ObjectId> contained;
};

// A canonical object let go, and the stores that must drop it.
struct Deallocation {
  ObjectId canonical = 0;
  absl::btree_set<StoreId> stores;
};

// Object ids, their aliases, reference counts and contained ids. Not thread-safe: the
// scheduler holds its lock around every call.
//
// Counting: each id carries its own count (client handles, pending task arguments, holds of
// the scheduler). An alias holds one count on its target and a container one on each id it
// contains; both are given back when the alias or container reaches zero. A canonical object
// at zero is deallocated on every store that holds it.
class ObjectTable {
 public:
  // A new id with one count (its creator's handle).
  ObjectId Create(OperationId producer, WorkerId put_by);

  const ObjectRecord* Find(ObjectId id) const;
  ObjectRecord* FindMutable(ObjectId id);
  // NOT_FOUND for an id never handed out, FAILED_PRECONDITION for one already let go (its
  // record kept or forgotten).
  absl::Status CheckLive(ObjectId id) const;
  // INVALID_ARGUMENT for a task argument with neither an id nor a value; CheckLive's error, naming
  // the argument, for one whose id is not live.
  absl::Status CheckArguments(const std::vector<TaskArg>& args) const;
  // Whether Hold(id) finds every record it needs: the id's and those of its alias chain.
  bool Holdable(ObjectId id) const;
  // The end of the id's alias chain.
  ObjectId Canonical(ObjectId id) const;

  // `alias` reads as `target` from now on. Refused, changing nothing: an unknown or released
  // id, an alias to itself or into a cycle, an alias that already has a value or a target.
  absl::Status Alias(ObjectId alias, ObjectId target);

  // Client counts: every id must be live (and for Drop, hold at least as many counts as it is
  // named), or nothing changes. An id named twice counts twice.
  absl::Status AddRefs(absl::Span<const ObjectId> ids);
  absl::Status DropRefs(absl::Span<const ObjectId> ids, std::vector<Deallocation>* freed);

  // The scheduler's own counts (pending task arguments, rebuilds). Hold brings a released id
  // back to life (its value, if any was kept, is gone; the caller rebuilds it); the id must be
  // Holdable.
  void Hold(ObjectId id);
  void Release(ObjectId id, std::vector<Deallocation>* freed);

  // `container` holds one count on each of `contained` until it is released.
  absl::Status AddContained(ObjectId container, absl::Span<const ObjectId> contained);

  // Drops a released id's record for good: the id reads as let go from now on, and is never
  // handed out again.
  void Forget(ObjectId id);

  // A record read back from saved state, as it was; a forgotten one; the next id to hand out.
  void Restore(ObjectId id, ObjectRecord record);
  void RestoreForgotten(ObjectId id);
  void RestoreNextId(ObjectId next) { next_id_ = std::max(next_id_, next); }
  // The ids whose records changed since the last call (FindMutable counts as a change); those
  // forgotten; those whose count reached zero (released).
  std::vector<ObjectId> TakeChanged();
  std::vector<ObjectId> TakeForgotten() { return std::exchange(forgotten_, {}); }
  std::vector<ObjectId> TakeReleased() { return std::exchange(released_, {}); }

  // Durability (SchedulerChanges). TakeChanges adds to `changes` (null: there is no journal) the
  // records changed, by id, and the ids forgotten since it was last called, and forgets that.
  // Apply forgets what `changes` says was forgotten after restoring the records it holds.
  void TakeChanges(SchedulerChanges* changes);
  void Apply(const SchedulerChanges& changes);
  void Capture(SchedulerChanges* state) const;

  size_t size() const { return objects_.size(); }
  ObjectId last_id() const { return next_id_ - 1; }
  ObjectId next_id() const { return next_id_; }
  template <typename F>
  void ForEach(F&& f) const {
    for (const auto& [id, record] : objects_) f(id, record);
  }

 private:
  ObjectId next_id_ = 1;
  absl::flat_hash_map<ObjectId, ObjectRecord> objects_;
  absl::flat_hash_set<ObjectId> dirty_;
  std::vector<ObjectId> forgotten_;
  std::vector<ObjectId> released_;
};

}  // namespace cohort::runtime
