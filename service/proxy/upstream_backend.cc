// UpstreamBackend: its channel, its construction, start and stop, and what it tells of itself.
#include "service/proxy/upstream_backend.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_format.h"
#include "common/grpc_auth.h"
#include "common/grpc_channel.h"
#include "service/proxy/upstream_forward.h"
#include "service/proxy/upstream_key_watch.h"

namespace cohort {

namespace tf = tensorflow;

std::shared_ptr<grpc::Channel> MakeUpstreamChannel(const UpstreamOptions& options) {
  grpc::ChannelArguments args;
  // jaxlib shares compiled executables through the store.
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  args.SetCompressionAlgorithm(GRPC_COMPRESS_GZIP);
  // Notice a coordinator that is gone, and find it again soon after it is back.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1'000);
  // A coordinator pod made again comes back at a new address under the same name: look the
  // name up again within a second, not gRPC's default of 30 s after the last lookup (the
  // coordinator came back in under a second and the proxy found it 24 s later).
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 1'000);
  if (!options.tls_server_name.empty()) args.SetSslTargetNameOverride(options.tls_server_name);
  auto credentials = options.credentials ? options.credentials : grpc::InsecureChannelCredentials();
  return CreateChannelWithToken(options.address, credentials, args, options.auth_token);
}

const char* UpstreamBackend::LinkName(Link link) {
  switch (link) {
    case Link::kNotYetConnected:
      return "not yet connected";
    case Link::kConnected:
      return "connected";
    case Link::kDown:
      return "down";
    case Link::kFailed:
      return "failed";
    case Link::kStopped:
      return "stopped";
  }
  return "unknown";
}

UpstreamBackend::UpstreamBackend(UpstreamOptions options)
    : options_(std::move(options)),
      channel_(MakeUpstreamChannel(options_)),
      stub_(tf::CoordinationService::NewStub(channel_)),
      cohort_stub_(v1::Coordinator::NewStub(channel_)),
      session_(absl::StrFormat("%016x", absl::Uniform<uint64_t>(absl::BitGen()))) {}

UpstreamBackend::~UpstreamBackend() {
  Stop(absl::UnavailableError("the sidecar proxy is shutting down"));
  // Every call is over; what still holds one (a context holds the channel) goes now, and
  // the channel last, from this thread (common/grpc_channel.h says why).
  std::vector<std::shared_ptr<Forward>> forwards;
  std::vector<std::shared_ptr<UpstreamKeyWatch>> watches;
  std::shared_ptr<UpstreamPark> park;
  {
    absl::MutexLock lock(&mu_);
    forwards.swap(held_);
    for (auto& [waiter, forward] : forwards_) forwards.push_back(std::move(forward));
    for (auto& [key, forward] : shared_) forwards.push_back(std::move(forward));
    forwards.insert(forwards.end(), live_.begin(), live_.end());
    forwards_.clear();
    shared_.clear();
    live_.clear();
    watches.swap(held_watches_);
    park = std::move(park_);
  }
  forwards.clear();
  watches.clear();
  park.reset();
  stub_.reset();
  cohort_stub_.reset();
  ReleaseChannel(&channel_);
}

void UpstreamBackend::Start() {
  absl::MutexLock lock(&mu_);
  if (started_ || link_ == Link::kStopped) return;
  started_ = true;
  link_thread_ = std::thread([this] { LinkLoop(); });
}

UpstreamBackend::Link UpstreamBackend::link() const {
  absl::MutexLock lock(&mu_);
  return link_;
}

bool UpstreamBackend::AwaitLink(Link want, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto reached = [this, want]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return link_ == want; };
  return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
}

int64_t UpstreamBackend::reissued_calls() const {
  absl::MutexLock lock(&mu_);
  return reissued_;
}

int64_t UpstreamBackend::outages() const {
  absl::MutexLock lock(&mu_);
  return outages_;
}

int64_t UpstreamBackend::parked_calls() const {
  std::shared_ptr<UpstreamPark> park;
  {
    absl::MutexLock lock(&mu_);
    park = park_;
  }
  return park ? static_cast<int64_t>(park->open_calls()) : 0;
}

void UpstreamBackend::SimulateLinkLossForTest() {
  absl::MutexLock lock(&mu_);
  MarkDownLocked();
}

int64_t UpstreamBackend::held_calls() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(held_.size());
}

uint64_t UpstreamBackend::service_incarnation() const {
  absl::MutexLock lock(&mu_);
  return service_incarnation_;
}

WaiterId UpstreamBackend::NewWaiterId() {
  absl::MutexLock lock(&mu_);
  return ++next_waiter_;
}

absl::StatusOr<TaskName> UpstreamBackend::ResolveTask(const std::string& job, int32_t id) const {
  std::shared_ptr<const KnownJobs> jobs;
  {
    absl::MutexLock lock(&mu_);
    jobs = jobs_;
  }
  // Before the coordinator was first reached the name goes as given (an empty job is the
  // coordinator's default job) and the coordinator judges it.
  if (!jobs) return TaskName{job, id};
  return jobs->directory().ResolveTask(job, id);
}

void UpstreamBackend::Stop(const absl::Status& why) {
  std::vector<std::shared_ptr<Forward>> live;
  std::vector<std::shared_ptr<UpstreamKeyWatch>> watches;
  std::shared_ptr<UpstreamPark> park;
  {
    absl::MutexLock lock(&mu_);
    if (link_ == Link::kStopped) return;
    link_ = Link::kStopped;
    failure_ = why;
    for (const auto& op : live_) {
      if (!op->parked_on) live.push_back(op);
    }
    park = std::move(park_);
    // A blocking call with no callback of ours: safe to cancel under the lock.
    if (probe_context_) probe_context_->TryCancel();
    for (auto& [waiter, watch] : watches_) watches.push_back(watch);
    watches_.clear();
  }
  // Their contexts stay: an attempt's context is replaced only by Issue, which a stopped
  // backend refuses.
  for (const auto& op : live) op->context->TryCancel();
  // Every call on the park stream ends with it.
  if (park) park->Shutdown();
  FailAll(why);
  for (const auto& watch : watches) watch->End(why);
  if (link_thread_.joinable()) link_thread_.join();
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
  mu_.Await(absl::Condition(&idle));
}

}  // namespace cohort
