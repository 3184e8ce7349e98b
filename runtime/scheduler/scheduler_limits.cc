// The refusal of a call past one of the task scheduler's limits.
#include "runtime/scheduler/scheduler_limits.h"

#include "absl/strings/str_cat.h"

namespace cohort::runtime {

absl::Status Fits(size_t have, size_t more, size_t limit, const char* what, const char* flag) {
  if (more <= limit && have <= limit - more) return absl::OkStatus();
  if (have == 0) {  // a limit on one call
    return absl::ResourceExhaustedError(
        absl::StrCat("the scheduler takes at most ", limit, " ", what, " (this call has ", more,
                     "); the coordinator's ", flag, " raises the limit"));
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "the scheduler keeps at most ", limit, " ", what, " (", have, " now, this call adds ", more,
      "); the coordinator's ", flag, " raises the limit"));
}

}  // namespace cohort::runtime
