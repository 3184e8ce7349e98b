#pragma once

#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/runtime/v1/services.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "runtime/scheduler/task_scheduler.h"

namespace cohort::runtime {

struct TransportOptions {
  // How often every worker and store is probed (WorkerService.Alive, ObjStore.ObjStoreInfo).
  absl::Duration probe_interval = absl::Seconds(1);
  // The deadline of the scheduler's calls, deliveries excepted (they last as long as the
  // copy: a lost source ends them).
  absl::Duration call_timeout = absl::Seconds(10);
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // null: plain text
  std::string auth_token;                                 // sent with every call when set
};

// Carries out what the scheduler asks of workers and stores: one queue and one thread per
// destination, so each sees its calls in the order they were decided. Reports back what
// failed (a worker that cannot take its task is lost; a delivery that failed is tried again)
// and probes every worker and store, so one that is gone is noticed within the scheduler's
// liveness timeout even when nothing is sent to it.
class SchedulerTransport {
 public:
  SchedulerTransport(TaskScheduler* scheduler, TransportOptions options);
  ~SchedulerTransport();

  void Start();
  // Waits for the calls under way; what is still queued is dropped.
  void Stop();

 private:
  struct Destination {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<::ObjStore::Stub> store;
    std::unique_ptr<::WorkerService::Stub> worker;
    absl::Mutex mu;
    std::deque<Effect> queue ABSL_GUARDED_BY(mu);
    bool stopping ABSL_GUARDED_BY(mu) = false;
    // The call under way, cancelled by Stop (a delivery may take as long as the copy).
    grpc::ClientContext* current ABSL_GUARDED_BY(mu) = nullptr;
    std::thread thread;
  };

  void DispatchLoop();
  void ProbeLoop();
  void ProbeOnce();
  Destination& DestinationFor(const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Drain(Destination* destination);
  void Carry(Destination& destination, const Effect& effect);
  std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout) const;
  // A context for a call to `d`, which Stop cancels; null when stopping.
  std::unique_ptr<grpc::ClientContext> CallTo(Destination& d, absl::Duration timeout);
  void Done(Destination& d);
  // Sleeps up to `d`; false when the transport stops meanwhile.
  bool Pause(absl::Duration d);

  TaskScheduler* const scheduler_;
  const TransportOptions options_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, std::unique_ptr<Destination>> destinations_ ABSL_GUARDED_BY(mu_);
  std::thread dispatcher_;
  std::thread prober_;
};

}  // namespace cohort::runtime
