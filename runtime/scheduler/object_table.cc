#include "runtime/scheduler/object_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/scheduler/scheduler_state.h"

namespace cohort::runtime {

ObjectId ObjectTable::Create(OperationId producer, WorkerId put_by) {
  ObjectId id = next_id_++;
  dirty_.insert(id);
  ObjectRecord& record = objects_[id];
  record.refs = 1;
  record.producer = producer;
  record.put_by = put_by;
  return id;
}

const ObjectRecord* ObjectTable::Find(ObjectId id) const {
  auto it = objects_.find(id);
  return it == objects_.end() ? nullptr : &it->second;
}

ObjectRecord* ObjectTable::FindMutable(ObjectId id) {
  auto it = objects_.find(id);
  if (it == objects_.end()) return nullptr;
  dirty_.insert(id);
  return &it->second;
}

absl::Status ObjectTable::CheckLive(ObjectId id) const {
  const ObjectRecord* record = Find(id);
  if (record == nullptr && id != 0 && id < next_id_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "object ", id, " was deallocated (its reference count reached zero) and forgotten"));
  }
  if (record == nullptr) return absl::NotFoundError(absl::StrCat("no object ", id));
  if (record->released) {
    return absl::FailedPreconditionError(
        absl::StrCat("object ", id, " was deallocated (its reference count reached zero)"));
  }
  return absl::OkStatus();
}

absl::Status ObjectTable::CheckArguments(const std::vector<TaskArg>& args) const {
  for (size_t i = 0; i < args.size(); ++i) {
    const TaskArg& arg = args[i];
    if (arg.id == 0 && arg.value.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("argument ", i, " has neither an object id nor a value"));
    }
    if (arg.id != 0) {
      if (absl::Status s = CheckLive(arg.id); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("argument ", i, ": ", s.message()));
      }
    }
  }
  return absl::OkStatus();
}

bool ObjectTable::Holdable(ObjectId id) const {
  for (const ObjectRecord* record = Find(id); record != nullptr; record = Find(record->alias_of)) {
    if (record->alias_of == 0) return true;
  }
  return false;
}

ObjectId ObjectTable::Canonical(ObjectId id) const {
  const ObjectRecord* record = Find(id);
  while (record != nullptr && record->alias_of != 0) {
    id = record->alias_of;
    record = Find(id);
  }
  return id;
}

absl::Status ObjectTable::Alias(ObjectId alias, ObjectId target) {
  if (absl::Status s = CheckLive(alias); !s.ok()) return s;
  if (absl::Status s = CheckLive(target); !s.ok()) return s;
  if (alias == target) {
    return absl::InvalidArgumentError(absl::StrCat("object ", alias, " cannot alias itself"));
  }
  if (Canonical(target) == alias) {
    return absl::InvalidArgumentError(
        absl::StrCat("aliasing object ", alias, " to ", target, " would make a cycle"));
  }
  ObjectRecord& record = objects_[alias];
  if (record.alias_of != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("object ", alias, " is already an alias of ", record.alias_of));
  }
  if (!record.locations.empty() || record.failed) {
    return absl::FailedPreconditionError(absl::StrCat("object ", alias, " already has a value"));
  }
  record.alias_of = target;
  ++objects_[target].refs;
  dirty_.insert(alias);
  dirty_.insert(target);
  return absl::OkStatus();
}

absl::Status ObjectTable::AddRefs(absl::Span<const ObjectId> ids) {
  for (ObjectId id : ids) {
    if (absl::Status s = CheckLive(id); !s.ok()) return s;
  }
  for (ObjectId id : ids) {
    ++objects_[id].refs;
    dirty_.insert(id);
  }
  return absl::OkStatus();
}

absl::Status ObjectTable::DropRefs(absl::Span<const ObjectId> ids,
                                   std::vector<Deallocation>* freed) {
  absl::flat_hash_map<ObjectId, int64_t> named;
  for (ObjectId id : ids) {
    if (absl::Status s = CheckLive(id); !s.ok()) return s;
    if (++named[id] > objects_[id].refs) {
      return absl::FailedPreconditionError(absl::StrCat("object ", id, " holds ", objects_[id].refs,
                                                        " references, fewer than the ", named[id],
                                                        " given back"));
    }
  }
  for (ObjectId id : ids) Release(id, freed);
  return absl::OkStatus();
}

void ObjectTable::Hold(ObjectId id) {
  dirty_.insert(id);
  ObjectRecord& record = objects_[id];
  if (record.refs++ > 0 || !record.released) return;
  // Back from the dead for a rebuild: its holds come back with it, its contents do not.
  record.released = false;
  record.contained.clear();
  if (record.alias_of != 0) Hold(record.alias_of);
}

void ObjectTable::Release(ObjectId id, std::vector<Deallocation>* freed) {
  dirty_.insert(id);
  ObjectRecord& record = objects_[id];
  if (--record.refs > 0) return;
  record.released = true;
  released_.push_back(id);
  if (record.alias_of != 0) {
    Release(record.alias_of, freed);
    return;
  }
  if (!record.locations.empty()) {
    freed->push_back({id, std::move(record.locations)});
    record.locations.clear();
  }
  record.size = 0;
  std::vector<ObjectId> contained = std::move(record.contained);
  record.contained.clear();
  for (ObjectId c : contained) Release(c, freed);
}

absl::Status ObjectTable::AddContained(ObjectId container, absl::Span<const ObjectId> contained) {
  if (absl::Status s = CheckLive(container); !s.ok()) return s;
  for (ObjectId id : contained) {
    if (id == container) {
      return absl::InvalidArgumentError(
          absl::StrCat("object ", container, " cannot contain itself"));
    }
    if (absl::Status s = CheckLive(id); !s.ok()) return s;
  }
  for (ObjectId id : contained) {
    ++objects_[id].refs;
    objects_[container].contained.push_back(id);
    dirty_.insert(id);
  }
  dirty_.insert(container);
  return absl::OkStatus();
}

void ObjectTable::Forget(ObjectId id) {
  objects_.erase(id);
  dirty_.erase(id);
  forgotten_.push_back(id);
}

void ObjectTable::RestoreForgotten(ObjectId id) {
  objects_.erase(id);
  if (id >= next_id_) next_id_ = id + 1;
}

void ObjectTable::Restore(ObjectId id, ObjectRecord record) {
  objects_[id] = std::move(record);
  if (id >= next_id_) next_id_ = id + 1;
}

std::vector<ObjectId> ObjectTable::TakeChanged() {
  std::vector<ObjectId> changed(dirty_.begin(), dirty_.end());
  dirty_.clear();
  return changed;
}

void ObjectTable::TakeChanges(SchedulerChanges* changes) {
  std::vector<ObjectId> changed = TakeChanged();
  std::vector<ObjectId> forgotten = TakeForgotten();
  if (changes == nullptr) return;
  std::sort(changed.begin(), changed.end());
  for (ObjectId id : changed) changes->objects.emplace_back(id, *Find(id));
  changes->forgotten_objects = std::move(forgotten);
}

void ObjectTable::Apply(const SchedulerChanges& changes) {
  for (const auto& [id, record] : changes.objects) Restore(id, record);
  for (ObjectId id : changes.forgotten_objects) RestoreForgotten(id);
  if (changes.next_object.has_value()) RestoreNextId(*changes.next_object);
}

void ObjectTable::Capture(SchedulerChanges* state) const {
  for (const auto& [id, record] : objects_) state->objects.emplace_back(id, record);
  std::sort(state->objects.begin(), state->objects.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  state->next_object = next_id_;
}

}  // namespace cohort::runtime
