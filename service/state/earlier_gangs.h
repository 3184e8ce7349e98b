#pragma once
// The state directories of a job's earlier gangs on the volume its coordinator keeps state
// on (cohort-coordinator --state-prune-before). The operator gives each gang of a job a
// directory of its own on the job's state claim, named "<start>-gang-<n>" (start as
// YYYYMMDDTHHMMSSZ, the job's start time, n its gang restart count), so that a gang restart
// or a resume starts from no state; without this, every earlier gang's directory stayed on
// the claim until it filled.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cohort {

// A directory name as the operator names a gang's state, parsed (`ok` false for any other
// name).
struct GangStateName {
  bool ok = false;
  std::string start;  // YYYYMMDDTHHMMSSZ, which sorts as time does
  uint64_t gang = 0;
};
GangStateName ParseGangStateName(absl::string_view name);

struct RemovedState {
  std::string path;
  uint64_t bytes = 0;  // of its files
};

// Removes every directory beside `path` (in its parent) named as a gang's state that comes
// before `path`'s own name (an earlier start, or the same start and a lower gang number),
// with what it holds; leaves every other entry (a later gang's, another name, a file). What
// it removed, in order. INVALID_ARGUMENT when `path`'s last part is not such a name, NOT_FOUND
// when its parent is not a directory; a directory that cannot be removed is an error too
// (what went before it stays removed).
absl::StatusOr<std::vector<RemovedState>> RemoveEarlierGangStates(const std::string& path);

}  // namespace cohort
