#pragma once

#include <cstdint>
#include <string>

namespace cohort {

// One change to the key-value store: what the coordinator's store records for its watches
// (service/core/key_watch.h) and what a client's watch delivers (agent/key_watcher.h). Every
// change bumps the store's revision; a recursive delete removes several keys under one revision.
struct KeyChange {
  enum class Type { kInserted, kUpdated, kDeleted };
  Type type = Type::kInserted;
  std::string key;
  std::string value;  // empty for deletes
  int64_t revision = 0;
};

// "insert", "update" or "delete", as cohortctl kv watch prints it.
inline const char* KeyChangeTypeName(KeyChange::Type type) {
  switch (type) {
    case KeyChange::Type::kInserted:
      return "insert";
    case KeyChange::Type::kUpdated:
      return "update";
    case KeyChange::Type::kDeleted:
      return "delete";
  }
  return "unknown";
}

}  // namespace cohort
