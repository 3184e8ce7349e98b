// The kv scenario's etcd driver: Put and Range for set and get, and a Watch stream per client
// for the blocking get (etcd has no blocking get; a client waits for a key with a watch).
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/kv_driver.h"
#include "etcd/etcd_kv.grpc.pb.h"

namespace cohort::bench {
namespace {

namespace epb = ::etcdserverpb;

// One client's watch stream. A cycle: create a watch on the key; once etcd confirms it, put
// the value; when the event arrives, cancel the watch; once cancelled, report.
class WatchStream : public grpc::ClientBidiReactor<epb::WatchRequest, epb::WatchResponse> {
 public:
  WatchStream(epb::Watch::Stub* watch, epb::KV::Stub* kv) : kv_(kv) {
    watch->async()->Watch(&context_, this);
    StartRead(&response_);
    StartCall();
  }

  void Cycle(const std::string& key, const std::string& value, WaitDone done) {
    std::lock_guard<std::mutex> l(mu_);
    key_ = key;
    value_ = value;
    done_ = std::move(done);
    start_ = Clock::now();
    state_ = State::kCreating;
    epb::WatchRequest r;
    r.mutable_create_request()->set_key(key);
    Write(std::move(r));
  }

  void Close() {
    context_.TryCancel();
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return closed_; });
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Fail();
      return;
    }
    std::unique_lock<std::mutex> l(mu_);
    if (state_ == State::kCreating && response_.created()) {
      state_ = State::kWaiting;
      watch_id_ = response_.watch_id();
      auto put = std::make_shared<Put>();
      put->request.set_key(key_);
      put->request.set_value(value_);
      kv_->async()->Put(&put->context, &put->request, &put->response,
                        [this, put](const grpc::Status& s) {
                          if (!s.ok()) Fail();
                        });
    } else if (state_ == State::kWaiting && !response_.events().empty()) {
      const auto& kv = response_.events(0).kv();
      waited_ = Seconds(start_, Clock::now());
      ok_ = kv.value().size() == value_.size();
      state_ = State::kCancelling;
      epb::WatchRequest r;
      r.mutable_cancel_request()->set_watch_id(watch_id_);
      Write(std::move(r));
    } else if (state_ == State::kCancelling && response_.canceled()) {
      state_ = State::kIdle;
      WaitDone done = std::move(done_);
      bool ok = ok_;
      double waited = waited_;
      l.unlock();
      done(ok, waited);
      l.lock();
    }
    StartRead(&response_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> l(mu_);
    writing_ = false;
    if (!ok) return;
    if (!queue_.empty()) {
      outgoing_ = std::move(queue_.front());
      queue_.erase(queue_.begin());
      writing_ = true;
      StartWrite(&outgoing_);
    }
  }

  void OnDone(const grpc::Status&) override {
    WaitDone done;
    {
      std::lock_guard<std::mutex> l(mu_);
      closed_ = true;
      if (state_ != State::kIdle) done = std::move(done_);
      state_ = State::kIdle;
      cv_.notify_all();
    }
    if (done) done(false, 0);
  }

 private:
  enum class State { kIdle, kCreating, kWaiting, kCancelling };
  struct Put {
    grpc::ClientContext context;
    epb::PutRequest request;
    epb::PutResponse response;
  };

  // Under mu_.
  void Write(epb::WatchRequest r) {
    if (writing_) {
      queue_.push_back(std::move(r));
      return;
    }
    outgoing_ = std::move(r);
    writing_ = true;
    StartWrite(&outgoing_);
  }

  void Fail() { context_.TryCancel(); }

  epb::KV::Stub* const kv_;
  grpc::ClientContext context_;
  epb::WatchResponse response_;
  std::mutex mu_;
  std::condition_variable cv_;
  State state_ = State::kIdle;
  std::string key_, value_;
  WaitDone done_;
  Clock::time_point start_;
  int64_t watch_id_ = 0;
  double waited_ = 0;
  bool ok_ = false;
  bool writing_ = false;
  bool closed_ = false;
  epb::WatchRequest outgoing_;
  std::vector<epb::WatchRequest> queue_;
};

class EtcdKvDriver : public KvDriver {
 public:
  EtcdKvDriver(const std::string& address, int channels, int clients) {
    for (int i = 0; i < std::max(1, channels); ++i) {
      auto channel = OwnChannel(address, i);
      kv_.push_back(epb::KV::NewStub(channel));
      watch_.push_back(epb::Watch::NewStub(channel));
    }
    streams_.resize(clients);
  }

  ~EtcdKvDriver() override {
    for (auto& s : streams_) {
      if (s) s->Close();
    }
  }

  void Set(int client, const std::string& key, const std::string& value, Done done) override {
    auto call = std::make_shared<Call<epb::PutRequest, epb::PutResponse>>();
    call->request.set_key(key);
    call->request.set_value(value);
    Kv(client)->async()->Put(&call->context, &call->request, &call->response,
                             [call, done = std::move(done)](const grpc::Status& s) { done(s); });
  }

  void Get(int client, const std::string& key, ValueDone done) override {
    auto call = std::make_shared<Call<epb::RangeRequest, epb::RangeResponse>>();
    call->request.set_key(key);
    Kv(client)->async()->Range(&call->context, &call->request, &call->response,
                               [call, done = std::move(done)](const grpc::Status& s) {
                                 if (s.ok() && call->response.kvs().empty()) {
                                   done(grpc::Status(grpc::StatusCode::NOT_FOUND, "no such key"),
                                        0);
                                   return;
                                 }
                                 done(s, s.ok() ? call->response.kvs(0).value().size() : 0);
                               });
  }

  void WaitCycle(int client, const std::string& key, const std::string& value,
                 WaitDone done) override {
    auto& stream = streams_[client];
    if (!stream) {
      int c = client % static_cast<int>(kv_.size());
      stream = std::make_unique<WatchStream>(watch_[c].get(), kv_[c].get());
    }
    stream->Cycle(key, value, std::move(done));
  }

 private:
  template <typename Request, typename Response>
  struct Call {
    grpc::ClientContext context;
    Request request;
    Response response;
  };

  epb::KV::Stub* Kv(int client) { return kv_[client % kv_.size()].get(); }

  std::vector<std::unique_ptr<epb::KV::Stub>> kv_;
  std::vector<std::unique_ptr<epb::Watch::Stub>> watch_;
  std::vector<std::unique_ptr<WatchStream>> streams_;
};

}  // namespace

std::unique_ptr<KvDriver> MakeEtcdKvDriver(const std::string& address, int channels, int clients) {
  return std::make_unique<EtcdKvDriver>(address, channels, clients);
}

}  // namespace cohort::bench
