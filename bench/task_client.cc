#include "bench/task_client.h"

#include <atomic>
#include <utility>
#include <vector>

#include "common/grpc_channel.h"
#include "tensorflow/coordination_service.grpc.pb.h"
#include "xla/coordination_service.grpc.pb.h"

namespace cohort::bench {
namespace {

namespace tf = ::tensorflow;
namespace xc = ::xla::coordination;

constexpr int64_t kBarrierTimeoutMs = 600'000;

uint64_t TaskIncarnation(int task) { return 1000 + static_cast<uint64_t>(task); }

// Starts one async unary call whose request, response and context live until it ends.
// `start` is (context, request, response, on_done) -> void, usually stub->async()->Method.
template <typename Response, typename Request, typename Start, typename OnDone>
CallHandle Invoke(Request request, Start start, OnDone on_done) {
  struct State {
    CallHandle context = std::make_shared<grpc::ClientContext>();
    Request request;
    Response response;
  };
  auto* state = new State;
  state->request = std::move(request);
  CallHandle context = state->context;
  start(context.get(), &state->request, &state->response,
        [state, on_done = std::move(on_done)](const grpc::Status& status) {
          on_done(status, state->response);
          delete state;
        });
  return context;
}

// Binds one method of a stub's async interface: (context, request, response, on_done).
template <typename AsyncInterface, typename Request, typename Response>
auto Bind(AsyncInterface* async,
          void (AsyncInterface::*method)(grpc::ClientContext*, const Request*, Response*,
                                         std::function<void(grpc::Status)>)) {
  return [async, method](grpc::ClientContext* c, const Request* q, Response* a,
                         std::function<void(grpc::Status)> cb) {
    (async->*method)(c, q, a, std::move(cb));
  };
}

template <typename Response>
auto StatusOnly(Done done) {
  return [done = std::move(done)](const grpc::Status& s, const Response&) { done(s); };
}

// A client's stubs over its channels. The channels go last, each once no call's context
// holds it: a callback's context is destroyed on gRPC's thread, and must not take the
// channel (and the completion queue that thread polls) with it (common/grpc_channel.h; the
// restart bench aborted in grpc_cq_internal_unref at the end of its latency scenario).
template <typename Service>
class StubSet {
 public:
  StubSet(const std::string& address, int channels) {
    for (int i = 0; i < std::max(1, channels); ++i) {
      channels_.push_back(OwnChannel(address, i));
      stubs_.push_back(Service::NewStub(channels_.back()));
    }
  }
  ~StubSet() {
    stubs_.clear();
    for (auto& channel : channels_) cohort::ReleaseChannel(&channel);
  }
  StubSet(const StubSet&) = delete;
  StubSet& operator=(const StubSet&) = delete;

  typename Service::Stub* For(int task) { return stubs_[task % stubs_.size()].get(); }

 private:
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<typename Service::Stub>> stubs_;
};

class XlaTaskClient : public TaskClient {
 public:
  XlaTaskClient(const std::string& address, int channels) : stubs_(address, channels) {}

  CallHandle RegisterTask(int task, Done done) override {
    xc::RegisterTaskRequest r;
    r.set_source_task_id(task);
    r.set_incarnation(TaskIncarnation(task));
    return Invoke<xc::RegisterTaskResponse>(
        std::move(r), Bind<Async_>(stub(task)->async(), &Async_::RegisterTask),
        [this, done = std::move(done)](const grpc::Status& s, const xc::RegisterTaskResponse& a) {
          if (s.ok()) service_incarnation_.store(a.service_incarnation());
          done(s);
        });
  }

  CallHandle Heartbeat(int task, Done done) override {
    xc::HeartbeatRequest r;
    *r.mutable_incarnations() = Inc(task);
    r.set_incarnation(TaskIncarnation(task));
    r.set_source_task_id(task);
    return Invoke<xc::HeartbeatResponse>(std::move(r),
                                         Bind<Async_>(stub(task)->async(), &Async_::Heartbeat),
                                         StatusOnly<xc::HeartbeatResponse>(std::move(done)));
  }

  CallHandle Barrier(int task, const std::string& id, Done done) override {
    xc::BarrierRequest r;
    *r.mutable_incarnations() = Inc(task);
    r.set_barrier_id(id);
    r.set_barrier_timeout_in_ms(kBarrierTimeoutMs);
    r.set_source_task_id(task);
    return Invoke<xc::BarrierResponse>(std::move(r),
                                       Bind<Async_>(stub(task)->async(), &Async_::Barrier),
                                       StatusOnly<xc::BarrierResponse>(std::move(done)));
  }

  CallHandle PollForError(int task, Done done) override {
    xc::PollForErrorRequest r;
    *r.mutable_incarnations() = Inc(task);
    r.set_source_task_id(task);
    return Invoke<xc::PollForErrorResponse>(
        std::move(r), Bind<Async_>(stub(task)->async(), &Async_::PollForError),
        StatusOnly<xc::PollForErrorResponse>(std::move(done)));
  }

  CallHandle WatchState(int task, Done done) override {
    xc::WatchTasksRequest r;
    *r.mutable_incarnations() = Inc(task);
    r.set_version_number(watch_version_.load());
    return Invoke<xc::WatchTasksResponse>(std::move(r),
                                          Bind<Async_>(stub(task)->async(), &Async_::WatchTasks),
                                          StatusOnly<xc::WatchTasksResponse>(std::move(done)));
  }

  CallHandle Insert(int task, const std::string& key, const std::string& value,
                    Done done) override {
    xc::InsertKeyValueRequest r;
    *r.mutable_incarnations() = Inc(task);
    r.mutable_kv()->set_key(key);
    r.mutable_kv()->set_value(value);
    r.set_allow_overwrite(true);
    return Invoke<xc::InsertKeyValueResponse>(
        std::move(r), Bind<Async_>(stub(task)->async(), &Async_::InsertKeyValue),
        StatusOnly<xc::InsertKeyValueResponse>(std::move(done)));
  }

  CallHandle TryGet(int task, const std::string& key, ValueDone done) override {
    xc::TryGetKeyValueRequest r;
    *r.mutable_incarnations() = Inc(task);
    r.set_key(key);
    return Invoke<xc::TryGetKeyValueResponse>(
        std::move(r), Bind<Async_>(stub(task)->async(), &Async_::TryGetKeyValue),
        [done = std::move(done)](const grpc::Status& s, const xc::TryGetKeyValueResponse& a) {
          done(s, a.kv().value().size());
        });
  }

  CallHandle BlockingGet(int task, const std::string& key, ValueDone done) override {
    xc::GetKeyValueRequest r;
    *r.mutable_incarnations() = Inc(task);
    r.set_key(key);
    return Invoke<xc::GetKeyValueResponse>(
        std::move(r), Bind<Async_>(stub(task)->async(), &Async_::GetKeyValue),
        [done = std::move(done)](const grpc::Status& s, const xc::GetKeyValueResponse& a) {
          done(s, a.kv().value().size());
        });
  }

  CallHandle Delete(int task, const std::string& key, Done done) override {
    xc::DeleteKeyValueRequest r;
    *r.mutable_incarnations() = Inc(task);
    r.set_key(key);
    return Invoke<xc::DeleteKeyValueResponse>(
        std::move(r), Bind<Async_>(stub(task)->async(), &Async_::DeleteKeyValue),
        StatusOnly<xc::DeleteKeyValueResponse>(std::move(done)));
  }

  bool WatchVersion(int task) override {
    xc::WatchTasksRequest r;
    *r.mutable_incarnations() = Inc(task);
    r.set_version_number(-1);
    xc::WatchTasksResponse a;
    grpc::ClientContext context;
    if (!stub(task)->WatchTasks(&context, r, &a).ok()) return false;
    watch_version_.store(a.version_number());
    return true;
  }

 private:
  using Async_ = xc::CoordinationService::Stub::async_interface;

  xc::CoordinationService::Stub* stub(int task) { return stubs_.For(task); }

  xc::Incarnations Inc(int task) const {
    xc::Incarnations inc;
    inc.set_task_id(task);
    inc.set_task_incarnation(TaskIncarnation(task));
    inc.set_service_incarnation(service_incarnation_.load());
    return inc;
  }

  StubSet<xc::CoordinationService> stubs_;
  std::atomic<uint64_t> service_incarnation_{0};
  std::atomic<int64_t> watch_version_{0};
};

class TensorflowTaskClient : public TaskClient {
 public:
  TensorflowTaskClient(const std::string& address, int channels, std::string job)
      : stubs_(address, channels), job_(std::move(job)) {}

  CallHandle RegisterTask(int task, Done done) override {
    tf::RegisterTaskRequest r;
    *r.mutable_source_task() = Task(task);
    r.set_incarnation(TaskIncarnation(task));
    return Invoke<tf::RegisterTaskResponse>(
        std::move(r), Bind<Async_>(stub(task)->async(), &Async_::RegisterTask),
        StatusOnly<tf::RegisterTaskResponse>(std::move(done)));
  }

  CallHandle Heartbeat(int task, Done done) override {
    tf::HeartbeatRequest r;
    *r.mutable_source_task() = Task(task);
    r.set_incarnation(TaskIncarnation(task));
    return Invoke<tf::HeartbeatResponse>(std::move(r),
                                         Bind<Async_>(stub(task)->async(), &Async_::Heartbeat),
                                         StatusOnly<tf::HeartbeatResponse>(std::move(done)));
  }

  CallHandle Barrier(int task, const std::string& id, Done done) override {
    tf::BarrierRequest r;
    *r.mutable_source_task() = Task(task);
    r.set_barrier_id(id);
    r.set_barrier_timeout_in_ms(kBarrierTimeoutMs);
    return Invoke<tf::BarrierResponse>(std::move(r),
                                       Bind<Async_>(stub(task)->async(), &Async_::Barrier),
                                       StatusOnly<tf::BarrierResponse>(std::move(done)));
  }

  CallHandle PollForError(int task, Done done) override {
    tf::PollForErrorRequest r;
    *r.mutable_source_task() = Task(task);
    return Invoke<tf::PollForErrorResponse>(
        std::move(r), Bind<Async_>(stub(task)->async(), &Async_::PollForError),
        StatusOnly<tf::PollForErrorResponse>(std::move(done)));
  }

  CallHandle WatchState(int task, Done done) override {
    tf::WatchJobStateRequest r;
    r.set_job_name(job_);
    r.set_version_number(watch_version_.load());
    return Invoke<tf::WatchJobStateResponse>(
        std::move(r), Bind<Async_>(stub(task)->async(), &Async_::WatchJobState),
        StatusOnly<tf::WatchJobStateResponse>(std::move(done)));
  }

  CallHandle Insert(int task, const std::string& key, const std::string& value,
                    Done done) override {
    tf::InsertKeyValueRequest r;
    r.mutable_kv()->set_key(key);
    r.mutable_kv()->set_value(value);
    r.set_allow_overwrite(true);
    return Invoke<tf::InsertKeyValueResponse>(
        std::move(r), Bind<Async_>(stub(task)->async(), &Async_::InsertKeyValue),
        StatusOnly<tf::InsertKeyValueResponse>(std::move(done)));
  }

  CallHandle TryGet(int task, const std::string& key, ValueDone done) override {
    tf::TryGetKeyValueRequest r;
    r.set_key(key);
    return Invoke<tf::TryGetKeyValueResponse>(
        std::move(r), Bind<Async_>(stub(task)->async(), &Async_::TryGetKeyValue),
        [done = std::move(done)](const grpc::Status& s, const tf::TryGetKeyValueResponse& a) {
          done(s, a.kv().value().size());
        });
  }

  CallHandle BlockingGet(int task, const std::string& key, ValueDone done) override {
    tf::GetKeyValueRequest r;
    r.set_key(key);
    return Invoke<tf::GetKeyValueResponse>(
        std::move(r), Bind<Async_>(stub(task)->async(), &Async_::GetKeyValue),
        [done = std::move(done)](const grpc::Status& s, const tf::GetKeyValueResponse& a) {
          done(s, a.kv().value().size());
        });
  }

  CallHandle Delete(int task, const std::string& key, Done done) override {
    tf::DeleteKeyValueRequest r;
    r.set_key(key);
    return Invoke<tf::DeleteKeyValueResponse>(
        std::move(r), Bind<Async_>(stub(task)->async(), &Async_::DeleteKeyValue),
        StatusOnly<tf::DeleteKeyValueResponse>(std::move(done)));
  }

  bool WatchVersion(int task) override {
    tf::WatchJobStateRequest r;
    r.set_job_name(job_);
    r.set_version_number(-1);
    tf::WatchJobStateResponse a;
    grpc::ClientContext context;
    if (!stub(task)->WatchJobState(&context, r, &a).ok()) return false;
    watch_version_.store(a.version_number());
    return true;
  }

 private:
  using Async_ = tf::CoordinationService::Stub::async_interface;

  tf::CoordinationService::Stub* stub(int task) { return stubs_.For(task); }

  tf::CoordinatedTask Task(int task) const {
    tf::CoordinatedTask t;
    t.set_job_name(job_);
    t.set_task_id(task);
    return t;
  }

  StubSet<tf::CoordinationService> stubs_;
  const std::string job_;
  std::atomic<int64_t> watch_version_{0};
};

}  // namespace

std::shared_ptr<grpc::Channel> OwnChannel(const std::string& address, int index) {
  grpc::ChannelArguments args;
  args.SetInt("cohort.bench.channel", index);  // distinct arguments: a connection of its own
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

std::unique_ptr<TaskClient> MakeTaskClient(const std::string& protocol, const std::string& address,
                                           int channels, const std::string& job) {
  if (protocol == "xla") return std::make_unique<XlaTaskClient>(address, channels);
  if (protocol == "tensorflow") {
    return std::make_unique<TensorflowTaskClient>(address, channels, job);
  }
  return nullptr;
}

}  // namespace cohort::bench
