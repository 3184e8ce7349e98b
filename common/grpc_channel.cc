#include "common/grpc_channel.h"

#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace cohort {

void ReleaseChannel(std::shared_ptr<grpc::Channel>* channel, absl::Duration patience) {
  if (!*channel) return;
  // use_count is exact once the other holders are gone, which is all this waits for. No
  // notification exists for it (the references are gRPC's and the callbacks'), hence the
  // polling; it normally ends at the first look or within a few milliseconds.
  const absl::Time deadline = absl::Now() + patience;
  while (channel->use_count() > 1) {
    if (absl::Now() >= deadline) {
      spdlog::warn("a gRPC channel still has {} other references after {}; letting go of it",
                   channel->use_count() - 1, absl::FormatDuration(patience));
      break;
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  channel->reset();
}

}  // namespace cohort
