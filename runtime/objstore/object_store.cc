#include "runtime/objstore/object_store.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace cohort::runtime {

absl::Status ObjectStore::Reserve(ObjectId id, uint64_t size) {
  absl::MutexLock lock(&mu_);
  if (size > capacity_ - std::min(used_, capacity_)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "object ", id, " of ", size, " bytes does not fit in this store: ", used_, " of its ",
        capacity_, " bytes are in use (raise --capacity, or drop references to free objects)"));
  }
  used_ += size;
  return absl::OkStatus();
}

void ObjectStore::Unreserve(uint64_t size) {
  absl::MutexLock lock(&mu_);
  used_ -= std::min(used_, size);
}

void ObjectStore::Commit(ObjectId id, StoredObject object, uint64_t reserved) {
  absl::MutexLock lock(&mu_);
  used_ -= std::min(used_, reserved);
  if (auto it = objects_.find(id); it != objects_.end()) {
    used_ -= std::min(used_, static_cast<uint64_t>(it->second.data->size()));
  }
  used_ += object.data->size();
  objects_[id] = std::move(object);
}

absl::Status ObjectStore::Put(ObjectId id, std::string data, uint64_t metadata_offset) {
  uint64_t size = data.size();
  if (absl::Status s = Reserve(id, size); !s.ok()) return s;
  Commit(id, StoredObject{InMemory(std::move(data)), metadata_offset}, size);
  return absl::OkStatus();
}

ObjectId ObjectStore::Resolve(ObjectId id) const {
  auto it = aliases_.find(id);
  return it == aliases_.end() ? id : it->second;
}

absl::StatusOr<StoredObject> ObjectStore::Get(ObjectId id) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = objects_.find(Resolve(id));
  if (it == objects_.end()) return absl::NotFoundError(absl::StrCat("object ", id, " is not here"));
  return it->second;
}

absl::StatusOr<StoredObject> ObjectStore::WaitFor(ObjectId id, absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto here = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || objects_.contains(Resolve(id));
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&here), deadline)) {
    return absl::DeadlineExceededError(
        absl::StrCat("object ", id, " did not arrive at this store in time"));
  }
  if (closed_) return absl::CancelledError("the object store is shutting down");
  return objects_.at(Resolve(id));
}

bool ObjectStore::Contains(ObjectId id) const {
  absl::ReaderMutexLock lock(&mu_);
  return objects_.contains(Resolve(id));
}

std::vector<ObjectId> ObjectStore::WaitForAny(const std::vector<ObjectId>& ids, size_t count,
                                              absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<ObjectId> here;
    for (ObjectId id : ids) {
      if (objects_.contains(Resolve(id))) here.push_back(id);
    }
    return here;
  };
  auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || present().size() >= count;
  };
  mu_.AwaitWithDeadline(absl::Condition(&enough), deadline);
  return present();
}

void ObjectStore::Alias(ObjectId alias, ObjectId canonical) {
  absl::MutexLock lock(&mu_);
  if (alias != canonical) aliases_[alias] = canonical;
}

void ObjectStore::Deallocate(ObjectId canonical) {
  absl::MutexLock lock(&mu_);
  if (auto it = objects_.find(canonical); it != objects_.end()) {
    used_ -= std::min(used_, static_cast<uint64_t>(it->second.data->size()));
    objects_.erase(it);
  }
  absl::erase_if(aliases_, [canonical](const auto& entry) { return entry.second == canonical; });
}

void ObjectStore::Clear() {
  absl::MutexLock lock(&mu_);
  objects_.clear();
  aliases_.clear();
  used_ = 0;
}

void ObjectStore::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

std::vector<ObjectId> ObjectStore::Ids() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<ObjectId> ids;
  for (const auto& [id, object] : objects_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

uint64_t ObjectStore::bytes() const {
  absl::ReaderMutexLock lock(&mu_);
  uint64_t total = 0;
  for (const auto& [id, object] : objects_) total += object.data->size();
  return total;
}

}  // namespace cohort::runtime
