// Where objects go: the calls to stores that deliver an object where it is wanted (from another
// store's copy, or as the error a failed object reads as), announce its aliases there, and drop
// it once it is let go; the deliveries under way and the stores waiting for an object that is
// ready nowhere yet are kept in its TransferTable. Not thread-safe: the scheduler holds its lock
// around every call. It reads the scheduler's members and operations, and the object records
// (where each object is), which the same lock guards; what happens to tasks stays the
// scheduler's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/scheduler/effects.h"
#include "runtime/scheduler/ids.h"
#include "runtime/scheduler/member_table.h"
#include "runtime/scheduler/object_table.h"
#include "runtime/scheduler/operation_table.h"
#include "runtime/scheduler/scheduler_views.h"
#include "runtime/scheduler/transfer_table.h"

namespace cohort::runtime {

class ObjectDirectory {
 public:
  // Records its calls in `effects`, and counts deliveries in `counters`.
  ObjectDirectory(MemberTable& members, ObjectTable& objects, const OperationTable& operations,
                  std::vector<Effect>& effects, SchedulerStats& counters)
      : members_(members),
        objects_(objects),
        operations_(operations),
        effects_(effects),
        counters_(counters) {}

  TransferTable& transfers() { return transfers_; }
  const TransferTable& transfers() const { return transfers_; }

  // Asks for `requested` (an id reading as `canonical`) at `store`.
  void WantAt(StoreId store, ObjectId requested, ObjectId canonical);
  // The stores waiting for `id` are asked for it again, now that it reads as `canonical` (it
  // landed, failed, or became an alias).
  void Answer(ObjectId id, ObjectId canonical);
  // `canonical` reads as `error` from now on; the stores waiting for it are given the error.
  void Fail(ObjectId canonical, const std::string& error);
  // A copy of canonical `object` (its record checked) landed at `store`, `size` bytes. False when
  // it was let go meanwhile: the store is told to drop it, and nobody waits for it any more.
  bool Landed(StoreId store, ObjectId object, uint64_t size);
  // The transport could not deliver `canonical` to `to`: try again, from another copy if there
  // is one, or wait for a rebuild.
  void DeliveryFailed(StoreId to, ObjectId canonical);
  // After a store was lost (TransferTable::StoreLost) and its objects' copies forgotten: the
  // deliveries that came from it (`resend`) start again.
  void Resend(const std::vector<TransferTable::Key>& resend);
  // Tells the live stores holding what was let go to drop it; nobody waits for it any more.
  void Deallocate(const std::vector<Deallocation>& freed);
  // After a restart: every delivery under way is asked for again, and every alias announced
  // again where its object is (the old process may have decided on these calls but never made
  // them).
  void SendAgain();

 private:
  void Deliver(StoreId to, ObjectId canonical);
  // Asks again, at `to`, for each id `delivery` (ended) was to announce, then for `canonical`.
  void AskAgain(StoreId to, ObjectId canonical, const Delivery& delivery);

  MemberTable& members_;
  ObjectTable& objects_;
  const OperationTable& operations_;
  std::vector<Effect>& effects_;
  SchedulerStats& counters_;
  TransferTable transfers_;
};

}  // namespace cohort::runtime
