#pragma once
// Waiting for something another thread or process does: poll an observable condition with a
// deadline rather than sleep for a guessed time. The deadline only matters when the test is
// about to fail, so it is generous.

#include <functional>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace cohort::testing {

// True as soon as `condition` holds; false when it still does not after `timeout`.
inline bool Eventually(const std::function<bool()>& condition,
                       absl::Duration timeout = absl::Seconds(20)) {
  for (absl::Time end = absl::Now() + timeout; absl::Now() < end;) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return condition();
}

}  // namespace cohort::testing
