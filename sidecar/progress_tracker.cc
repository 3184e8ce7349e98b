#include "sidecar/progress_tracker.h"

#include <algorithm>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace cohort {

const char* ProgressTracker::SignName(Sign sign) {
  switch (sign) {
    case Sign::kNone:
      return "none";
    case Sign::kReport:
      return "report";
    case Sign::kCoordinationCall:
      return "coordination call";
    case Sign::kGpuUtilization:
      return "GPU utilisation";
    case Sign::kGpuSmActivity:
      return "GPU SM activity";
    case Sign::kWaitingOnPeers:
      return "waiting on its peers in a coordination call";
  }
  return "none";
}

ProgressTracker::ProgressTracker(Options options, absl::Time start)
    : options_(options), last_progress_(start) {}

void ProgressTracker::Progress(absl::Time at, Sign sign) {
  // Signs read at different moments may arrive out of order: progress never goes back.
  last_progress_ = std::max(last_progress_, at);
  last_sign_ = sign;
}

void ProgressTracker::Reported(absl::Time at, std::optional<int64_t> step) {
  reports_seen_ = true;
  if (step) step_ = step;
  Progress(at, Sign::kReport);
}

void ProgressTracker::CoordinationCalls(absl::Time at, uint64_t finished) {
  // The first reading is where counting starts; a smaller count is a restarted proxy's.
  bool more = calls_ && finished > *calls_;
  calls_ = finished;
  if (more && !reports_seen_) Progress(at, Sign::kCoordinationCall);
}

void ProgressTracker::GpuActivity(absl::Time at, const GpuActivityReading& activity) {
  const bool sm = activity.measure == GpuActivityReading::Measure::kSmActivity;
  const double threshold =
      sm ? options_.gpu_sm_activity_threshold : options_.gpu_utilization_threshold;
  if (activity.value >= threshold && !reports_seen_) {
    Progress(at, sm ? Sign::kGpuSmActivity : Sign::kGpuUtilization);
  }
}

void ProgressTracker::WaitingOnPeers(absl::Time at) { Progress(at, Sign::kWaitingOnPeers); }

absl::Duration ProgressTracker::SinceProgress(absl::Time now) const {
  return std::max(absl::ZeroDuration(), now - last_progress_);
}

bool ProgressTracker::Stalled(absl::Time now) const {
  return options_.timeout > absl::ZeroDuration() && SinceProgress(now) >= options_.timeout;
}

std::string ProgressTracker::Describe(absl::Time now) const {
  std::string text = absl::StrCat("no progress for ", absl::FormatDuration(options_.timeout));
  std::string ago = absl::FormatDuration(absl::Trunc(SinceProgress(now), absl::Milliseconds(100)));
  switch (last_sign_) {
    case Sign::kNone:
      absl::StrAppend(&text, " (none seen since the workload started, ", ago, " ago)");
      break;
    case Sign::kReport:
      absl::StrAppend(&text, " (last: ", step_ ? absl::StrCat("step ", *step_, ", ") : "",
                      "reported ", ago, " ago)");
      break;
    default:
      absl::StrAppend(&text, " (last: ", SignName(last_sign_), " ", ago, " ago)");
      break;
  }
  return text;
}

std::optional<int64_t> ParseProgressStep(const std::string& content) {
  std::vector<absl::string_view> lines = absl::StrSplit(content, '\n');
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    absl::string_view line = absl::StripAsciiWhitespace(*it);
    if (line.empty()) continue;
    int64_t step = 0;
    if (absl::SimpleAtoi(line, &step)) return step;
  }
  return std::nullopt;
}

}  // namespace cohort
