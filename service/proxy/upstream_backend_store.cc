// UpstreamBackend: barriers, the key-value store and its watches, the cluster snapshot, and
// PyTorch's TCPStore commands.
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "service/core/errors.h"
#include "service/proxy/upstream_backend.h"
#include "service/proxy/upstream_forward.h"
#include "service/rpc/status_translation.h"
#include "service/rpc/torch_store_messages.h"
#include "spdlog/spdlog.h"

namespace cohort {

namespace tf = tensorflow;

// ---- Barriers --------------------------------------------------------------------------

void UpstreamBackend::Barrier(const CallContext& call, const std::string& id, int64_t counter,
                              absl::Duration timeout, const TaskName& caller,
                              std::vector<TaskName> tasks, Done<int64_t> done) {
  tf::BarrierRequest request;
  request.set_barrier_id(id);
  request.set_counter(counter);
  request.set_barrier_timeout_in_ms(timeout == absl::InfiniteDuration()
                                        ? 0
                                        : std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout)));
  *request.mutable_source_task() = ToWireTask(caller);
  for (const TaskName& task : tasks) *request.add_tasks() = ToWireTask(task);
  // A barrier sent again arrives again with the same counter: the coordinator counts the
  // caller once, or answers the instance's cached result.
  SendOptions options;
  options.park = true;
  Send<tf::BarrierResponse>(
      call, &Async::Barrier, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::BarrierResponse& r) {
        if (!s.ok()) return done(s);
        done(r.counter());
      },
      std::move(options));
}

void UpstreamBackend::CancelBarrier(const CallContext& call, const std::string& id, int64_t counter,
                                    const TaskName& caller, StatusDone done) {
  tf::CancelBarrierRequest request;
  request.set_barrier_id(id);
  request.set_counter(counter);
  *request.mutable_source_task() = ToWireTask(caller);
  SendOptions options;
  options.once = true;  // an attempt again of the cancel that took effect is OK
  Send<tf::CancelBarrierResponse>(
      call, &Async::CancelBarrier, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::CancelBarrierResponse&) {
        done(s);
      },
      std::move(options));
}

// ---- Key-value store -------------------------------------------------------------------

void UpstreamBackend::InsertKeyValue(const CallContext& call, std::string key, std::string value,
                                     bool allow_overwrite, StatusDone done) {
  tf::InsertKeyValueRequest request;
  request.mutable_kv()->set_key(key);
  request.mutable_kv()->set_value(value);
  request.set_allow_overwrite(allow_overwrite);
  // The first attempt may have stored the value before the coordinator went away: the
  // coordinator answers an attempt again as it answered the first, and stores nothing twice.
  SendOptions options;
  options.once = true;
  Send<tf::InsertKeyValueResponse>(
      call, &Async::InsertKeyValue, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::InsertKeyValueResponse&) {
        done(s);
      },
      std::move(options));
}

void UpstreamBackend::GetKeyValue(const CallContext& call, std::string key,
                                  std::optional<absl::Duration> timeout, Done<std::string> done) {
  tf::GetKeyValueRequest request;
  request.set_key(key);
  SendOptions options;
  options.park = true;
  absl::Time own_deadline = absl::InfiniteFuture();
  if (timeout) {
    own_deadline = absl::Now() + *timeout;
    options.deadline = own_deadline;
  } else {
    // Local callers waiting for the same key share one upstream get.
    options.share_key = absl::StrCat("GetKeyValue/", KeyValueStore::NormalizeKey(key));
  }
  Send<tf::GetKeyValueResponse>(
      call, &Async::GetKeyValue, std::move(request),
      [key, own_deadline, done = std::move(done)](const absl::Status& s,
                                                  const tf::GetKeyValueResponse& r) {
        if (s.code() == absl::StatusCode::kDeadlineExceeded && !GetServiceError(s) &&
            absl::Now() >= own_deadline) {
          return done(absl::DeadlineExceededError(absl::StrCat(
              "timed out waiting for key \"", KeyValueStore::NormalizeKey(key), "\"")));
        }
        if (!s.ok()) return done(s);
        done(r.kv().value());
      },
      std::move(options));
}

void UpstreamBackend::TryGetKeyValue(const CallContext& call, std::string key,
                                     Done<std::string> done) {
  tf::TryGetKeyValueRequest request;
  request.set_key(key);
  Send<tf::TryGetKeyValueResponse>(
      call, &Async::TryGetKeyValue, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::TryGetKeyValueResponse& r) {
        if (!s.ok()) return done(s);
        done(r.kv().value());
      });
}

void UpstreamBackend::IncrementKeyValue(const CallContext& call, std::string key, int64_t delta,
                                        Done<int64_t> done) {
  tf::IncrementKeyValueRequest request;
  request.set_key(key);
  request.set_increment(delta);
  SendOptions options;
  options.once = true;  // applied once, however often it is sent
  Send<tf::IncrementKeyValueResponse>(
      call, &Async::IncrementKeyValue, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::IncrementKeyValueResponse& r) {
        if (!s.ok()) return done(s);
        int64_t sum = 0;
        if (!absl::SimpleAtoi(r.kv().value(), &sum)) {
          return done(absl::InternalError(
              absl::StrCat("the coordinator answered a non-number: \"", r.kv().value(), "\"")));
        }
        done(sum);
      },
      std::move(options));
}

void UpstreamBackend::GetKeyValueDir(const CallContext& call, std::string dir,
                                     Done<std::vector<KeyValueEntry>> done) {
  tf::GetKeyValueDirRequest request;
  request.set_directory_key(dir);
  Send<tf::GetKeyValueDirResponse>(
      call, &Async::GetKeyValueDir, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::GetKeyValueDirResponse& r) {
        if (!s.ok()) return done(s);
        std::vector<KeyValueEntry> entries;
        for (const auto& kv : r.kv()) entries.push_back({kv.key(), kv.value()});
        done(std::move(entries));
      });
}

void UpstreamBackend::DeleteKeyValue(const CallContext& call, std::string key, StatusDone done) {
  tf::DeleteKeyValueRequest request;
  request.set_key(key);
  Send<tf::DeleteKeyValueResponse>(
      call, &Async::DeleteKeyValue, std::move(request),
      [done = std::move(done)](const absl::Status& s, const tf::DeleteKeyValueResponse&) {
        done(s);
      });
}

void UpstreamBackend::WatchKeys(const CallContext& call, std::string key, int64_t start_revision,
                                std::function<void()> notify,
                                Done<std::shared_ptr<KeyWatch>> started) {
  auto watch = std::make_shared<UpstreamKeyWatch>(
      call.waiter, std::move(key), start_revision, std::move(notify), std::move(started),
      [this](const std::shared_ptr<UpstreamKeyWatch>& w) { HoldWatch(w); },
      [this, waiter = call.waiter] {
        absl::MutexLock lock(&mu_);
        watches_.erase(waiter);
      });
  absl::Status refused;
  bool begin = false;
  {
    absl::MutexLock lock(&mu_);
    if (link_.ended()) {
      refused = link_.failure();
    } else {
      watches_[call.waiter] = watch;
      if (link_.connected()) {
        begin = true;
      } else {
        held_watches_.push_back(watch);
      }
    }
  }
  if (!refused.ok()) return watch->End(refused);
  if (begin) watch->Begin(cohort_stub_->async());
}

void UpstreamBackend::GetCoordinatorSnapshot(const CallContext& call,
                                             Done<CoordinatorSnapshot> done) {
  auto messages = std::make_shared<std::pair<v1::GetClusterSnapshotRequest, v1::ClusterSnapshot>>();
  auto op = std::make_shared<Forward>();
  auto* async = cohort_stub_->async();
  op->start = [async, messages](grpc::ClientContext* ctx, std::function<void(grpc::Status)> d) {
    using CohortAsync = v1::Coordinator::StubInterface::async_interface;
    SendVia<v1::ClusterSnapshot, v1::GetClusterSnapshotRequest, CohortAsync>(
        async, &CohortAsync::GetClusterSnapshot, messages, ctx, std::move(d));
  };
  op->response = &messages->second;
  op->messages = messages;
  op->deadline = call.deadline;
  Submit(op, call.waiter,
         [done = std::move(done)](const absl::Status& s, const google::protobuf::Message& m) {
           if (!s.ok()) return done(s);
           done(FromWire(static_cast<const v1::ClusterSnapshot&>(m), absl::Now()));
         });
}

// ---- PyTorch's TCPStore ----------------------------------------------------------------

void UpstreamBackend::TorchStoreCommand(const CallContext& call,
                                        const ForwardedTorchCommand& command,
                                        Done<std::string> done) {
  auto messages = std::make_shared<std::pair<v1::TorchStoreRequest, v1::TorchStoreResponse>>();
  TorchCommandToProto(command, &messages->first);
  auto op = std::make_shared<Forward>();
  auto* async = cohort_stub_->async();
  op->start = [async, messages](grpc::ClientContext* ctx, std::function<void(grpc::Status)> d) {
    using CohortAsync = v1::Coordinator::StubInterface::async_interface;
    SendVia<v1::TorchStoreResponse, v1::TorchStoreRequest, CohortAsync>(
        async, &CohortAsync::TorchStore, messages, ctx, std::move(d));
  };
  op->response = &messages->second;
  op->messages = messages;
  if (command.waits) {
    // A WAIT parks in the coordinator until its keys are there: on the park stream, and parked
    // again by a restarted coordinator. A command sent again is harmless: the coordinator
    // keeps the answer of the connection's last change (torch::ForwardedCommands).
    op->options.park = true;
    op->park = [messages](v1::ParkRequest* out) { *out->mutable_torch_store() = messages->first; };
    op->take_park_result = [messages](const v1::ParkResponse& in) {
      messages->second = in.torch_store();
    };
  }
  op->deadline = call.deadline;
  Submit(op, call.waiter,
         [done = std::move(done)](const absl::Status& s, const google::protobuf::Message& m) {
           if (!s.ok()) return done(s);
           done(static_cast<const v1::TorchStoreResponse&>(m).reply());
         });
}

void UpstreamBackend::TorchStoreBatch(const CallContext& call,
                                      const std::vector<ForwardedTorchCommand>& commands,
                                      Done<std::vector<absl::StatusOr<std::string>>> done) {
  auto messages =
      std::make_shared<std::pair<v1::TorchStoreBatchRequest, v1::TorchStoreBatchResponse>>();
  TorchBatchToProto(commands, &messages->first);
  const size_t entries = commands.size();
  auto op = std::make_shared<Forward>();
  auto* async = cohort_stub_->async();
  op->start = [async, messages](grpc::ClientContext* ctx, std::function<void(grpc::Status)> d) {
    using CohortAsync = v1::Coordinator::StubInterface::async_interface;
    SendVia<v1::TorchStoreBatchResponse, v1::TorchStoreBatchRequest, CohortAsync>(
        async, &CohortAsync::TorchStoreBatch, messages, ctx, std::move(d));
  };
  op->response = &messages->second;
  op->messages = messages;
  op->deadline = call.deadline;
  // Sent again after an outage, its commands already carried out are not carried out again
  // (each client's record, torch::ForwardedCommands::ExecuteBatch).
  Submit(
      op, call.waiter,
      [done = std::move(done), entries](const absl::Status& s, const google::protobuf::Message& m) {
        if (!s.ok()) return done(s);
        auto results = TorchResultsFromProto(static_cast<const v1::TorchStoreBatchResponse&>(m));
        if (results.size() != entries) {
          return done(
              absl::InternalError(absl::StrCat("the coordinator answered ", results.size(),
                                               " results to ", entries, " forwarded commands")));
        }
        done(std::move(results));
      });
}

}  // namespace cohort
