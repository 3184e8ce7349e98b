#include "operator/controller/coordinator_watcher.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cohort/runtime/v1/services.grpc.pb.h"
#include "cohort/v1/coordinator.grpc.pb.h"
#include "common/grpc_auth.h"
#include "spdlog/spdlog.h"

namespace cohort::controller {

struct CoordinatorWatcher::Follow {
  std::string key;
  std::string address;
  int restart = 0;
  CoordinatorCredentials credentials;
  bool task_runtime = false;  // also asks the scheduler for its task counts
  std::atomic<bool> stop{false};
  std::atomic<bool> done{false};
  absl::Mutex mu;
  absl::CondVar cv;
  std::optional<CoordinatorView> view;  // guarded by CoordinatorWatcher::mu_
  std::thread thread;
};

namespace {

CoordinatorView Reduce(const cohort::v1::ClusterSnapshot& snapshot) {
  CoordinatorView view;
  for (const auto& t : snapshot.tasks()) {
    if (!t.auxiliary() && t.state() == cohort::v1::CONNECTED) {
      ++view.registered;
      view.workload_incarnations[t.task_id()] = t.incarnation();
    }
    if (t.state() == cohort::v1::ERROR) {
      // A reason this operator does not know (a newer coordinator's) is no reason it matches.
      view.errors.push_back(
          {absl::StrCat("/job:", t.job(), "/task:", t.task_id()), t.auxiliary(), t.error_code(),
           t.error_message(),
           FailureReasonFromNumber(t.reason()).value_or(FailureReason::kUnspecified)});
    }
    if (t.has_step() || t.has_busy_seconds_per_step()) {
      TaskProgress& progress = view.progress[absl::StrCat("/job:", t.job(), "/task:", t.task_id())];
      if (t.has_step()) progress.step = t.step();
      if (t.has_busy_seconds_per_step()) progress.busy_seconds_per_step = t.busy_seconds_per_step();
    }
  }
  return view;
}

// Whether the controller needs waking. Progress values are left out on purpose: they move with
// every heartbeat (every few seconds per task), and a reconcile per heartbeat would cost the
// operator and the API server much for nothing; only which tasks have a pace counts. The view
// kept is always the latest, so a reconcile for any other reason (or one the plan asks for
// again later) reads fresh progress.
bool SameView(const std::optional<CoordinatorView>& a, const CoordinatorView& b) {
  if (!a || a->registered != b.registered || a->errors.size() != b.errors.size() ||
      a->task_runtime != b.task_runtime || a->workload_incarnations != b.workload_incarnations) {
    return false;
  }
  for (size_t i = 0; i < b.errors.size(); ++i) {
    if (a->errors[i].task != b.errors[i].task) return false;
  }
  // Paces move with every heartbeat and are not changes; a task's first one is, so that the
  // plan starts looking at the gang's stragglers (plan/stragglers.cc).
  return a->PacedTasks() == b.PacedTasks();
}

}  // namespace

CoordinatorWatcher::CoordinatorWatcher(absl::Duration interval,
                                       std::function<void(const std::string&)> on_change)
    : interval_(interval), on_change_(std::move(on_change)) {}

CoordinatorWatcher::~CoordinatorWatcher() { StopAll(); }

void CoordinatorWatcher::Watch(const std::string& key, const std::string& address, int restart,
                               const CoordinatorCredentials& credentials, bool task_runtime) {
  std::shared_ptr<Follow> old;
  {
    absl::MutexLock lock(&mu_);
    auto it = follows_.find(key);
    if (it != follows_.end()) {
      if (it->second->address == address && it->second->restart == restart &&
          it->second->credentials == credentials && it->second->task_runtime == task_runtime) {
        return;
      }
      old = it->second;
      follows_.erase(it);
    }
    auto follow = std::make_shared<Follow>();
    follow->key = key;
    follow->address = address;
    follow->restart = restart;
    follow->credentials = credentials;
    follow->task_runtime = task_runtime;
    follows_[key] = follow;
    follow->thread = std::thread([this, follow] { Run(follow); });
  }
  if (old) Retire(old);
}

// An old follow ends within one call's deadline; it is joined later, never waited for here.
void CoordinatorWatcher::Retire(const std::shared_ptr<Follow>& old) {
  old->stop = true;
  old->cv.SignalAll();
  absl::MutexLock lock(&mu_);
  retired_.push_back(old);
  for (auto it = retired_.begin(); it != retired_.end();) {
    if ((*it)->done) {
      (*it)->thread.join();
      it = retired_.erase(it);
    } else {
      ++it;
    }
  }
}

void CoordinatorWatcher::Unwatch(const std::string& key) {
  std::shared_ptr<Follow> old;
  {
    absl::MutexLock lock(&mu_);
    auto it = follows_.find(key);
    if (it == follows_.end()) return;
    old = it->second;
    follows_.erase(it);
  }
  Retire(old);
}

std::optional<CoordinatorView> CoordinatorWatcher::View(const std::string& key, int restart) const {
  absl::MutexLock lock(&mu_);
  auto it = follows_.find(key);
  if (it == follows_.end() || it->second->restart != restart) return std::nullopt;
  return it->second->view;
}

size_t CoordinatorWatcher::Watched() const {
  absl::MutexLock lock(&mu_);
  return follows_.size();
}

void CoordinatorWatcher::StopAll() {
  std::map<std::string, std::shared_ptr<Follow>> all;
  {
    absl::MutexLock lock(&mu_);
    all.swap(follows_);
    for (auto& f : retired_) all[absl::StrCat("retired/", all.size())] = f;
    retired_.clear();
  }
  for (auto& [key, f] : all) {
    f->stop = true;
    f->cv.SignalAll();
  }
  for (auto& [key, f] : all) {
    if (f->thread.joinable()) f->thread.join();
  }
}

void CoordinatorWatcher::Run(const std::shared_ptr<Follow>& follow) {
  grpc::ChannelArguments args;
  std::shared_ptr<grpc::ChannelCredentials> transport = grpc::InsecureChannelCredentials();
  if (const auto& tls = follow->credentials.tls) {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = tls->ca_cert;
    options.pem_cert_chain = tls->client_cert;
    options.pem_private_key = tls->client_key;
    transport = grpc::SslCredentials(options);
    // Dialled at the pod's IP; the certificate names the Service.
    args.SetSslTargetNameOverride(follow->credentials.server_name);
  }
  auto channel =
      CreateChannelWithToken(follow->address, transport, args, follow->credentials.token);
  auto stub = cohort::v1::Coordinator::NewStub(channel);
  auto scheduler = ::Scheduler::NewStub(channel);
  bool said_unreachable = false;
  while (!follow->stop) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    cohort::v1::ClusterSnapshot snapshot;
    grpc::Status status = stub->GetClusterSnapshot(&context, {}, &snapshot);
    if (status.ok()) {
      said_unreachable = false;
      CoordinatorView view = Reduce(snapshot);
      if (follow->task_runtime) {
        grpc::ClientContext tasks_context;
        tasks_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
        cohort::runtime::v1::TaskInfoReply tasks;
        if (scheduler->TaskInfo(&tasks_context, {}, &tasks).ok()) {
          view.task_runtime =
              api::TaskRuntimeStatus{static_cast<int64_t>(tasks.num_succeeded()),
                                     tasks.failed_task_size(), tasks.running_task_size()};
        }
      }
      bool changed = false;
      {
        absl::MutexLock lock(&mu_);
        changed = !SameView(follow->view, view);
        follow->view = std::move(view);
      }
      if (changed && !follow->stop) on_change_(follow->key);
    } else if (!said_unreachable) {
      spdlog::debug("coordinator of {} at {}: {}", follow->key, follow->address,
                    status.error_message());
      said_unreachable = true;
    }
    const absl::Time until = absl::Now() + interval_;
    absl::MutexLock lock(&follow->mu);
    while (!follow->stop.load() && !follow->cv.WaitWithDeadline(&follow->mu, until)) {
    }
  }
  follow->done = true;
}

}  // namespace cohort::controller
