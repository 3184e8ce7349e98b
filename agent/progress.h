// The workload's side of hang detection: telling its pod's sidecar that it made progress.
// The sidecar watches the file named by $COHORT_PROGRESS_FILE (the operator sets it in the
// workload's containers): any write counts as progress, and a whole number written is the
// step (ParseProgressStep, sidecar/progress_tracker.h). Call it once per training step.
//
//   cohort::ReportProgress(step);  // after each step
//
// The same from Python: cohort.progress.report(step); from a shell:
// echo $STEP > $COHORT_PROGRESS_FILE.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace cohort {

// Writes `step` to $COHORT_PROGRESS_FILE, replacing what was there; without a step, a line
// that is no number (progress all the same, with no step to show). False, and nothing done,
// when the variable is unset or empty. Never throws: a file that cannot be written is false,
// and logged once per process, since a training run must not die of a progress report.
bool ReportProgress(std::optional<int64_t> step = std::nullopt);

// The same with the file named here.
bool ReportProgress(const std::string& path, std::optional<int64_t> step);

}  // namespace cohort
