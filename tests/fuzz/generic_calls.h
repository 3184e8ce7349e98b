#pragma once
// For the RPC fuzz targets: any method of the named services, called over a channel with the
// fuzzer's bytes as its request message, through gRPC's own decoding. A call that has not
// ended after `patience` is cancelled (which exercises the cancellation paths); streaming
// methods get one message and the client's half-close.

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

namespace cohort::fuzzing {

class GenericCaller {
 public:
  GenericCaller(const std::shared_ptr<grpc::Channel>& channel,
                const std::vector<std::string>& services, absl::Duration patience)
      : stub_(std::make_unique<grpc::GenericStub>(channel)), patience_(patience) {
    for (const std::string& name : services) {
      const auto* service =
          google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(name);
      if (!service) {
        std::fprintf(stderr, "no service %s in the generated descriptor pool\n", name.c_str());
        std::abort();
      }
      for (int i = 0; i < service->method_count(); ++i) {
        const auto* m = service->method(i);
        methods_.push_back(
            {"/" + name + "/" + m->name(), m->client_streaming() || m->server_streaming()});
      }
    }
  }

  size_t method_count() const { return methods_.size(); }

  void Call(size_t selector, const uint8_t* data, size_t size) {
    const Method& method = methods_[selector % methods_.size()];
    grpc::Slice slice(data, size);
    grpc::ByteBuffer request(&slice, 1);
    if (method.streaming) {
      Stream(method.path, request);
    } else {
      Unary(method.path, request);
    }
  }

 private:
  struct Method {
    std::string path;  // "/package.Service/Method"
    bool streaming = false;
  };

  void Unary(const std::string& path, const grpc::ByteBuffer& request) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    grpc::ByteBuffer response;
    absl::Notification done;
    stub_->UnaryCall(&context, path, grpc::StubOptions(), &request, &response,
                     [&done](const grpc::Status&) { done.Notify(); });
    if (!done.WaitForNotificationWithTimeout(patience_)) {
      context.TryCancel();
      done.WaitForNotification();
    }
  }

  // One request message, its answers read until the patience runs out, then cancelled.
  class StreamCall : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
   public:
    explicit StreamCall(const grpc::ByteBuffer& request) : request_(request) {}
    void Start() {
      StartWriteLast(&request_, grpc::WriteOptions());
      StartRead(&response_);
      StartCall();
    }
    void OnWriteDone(bool) override {}
    void OnReadDone(bool ok) override {
      if (ok) StartRead(&response_);
    }
    void OnDone(const grpc::Status&) override { done_.Notify(); }
    absl::Notification& done() { return done_; }

   private:
    grpc::ByteBuffer request_;
    grpc::ByteBuffer response_;
    absl::Notification done_;
  };

  void Stream(const std::string& path, const grpc::ByteBuffer& request) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    StreamCall call(request);
    stub_->PrepareBidiStreamingCall(&context, path, grpc::StubOptions(), &call);
    call.Start();
    if (!call.done().WaitForNotificationWithTimeout(patience_)) {
      context.TryCancel();
      call.done().WaitForNotification();
    }
  }

  std::unique_ptr<grpc::GenericStub> stub_;
  const absl::Duration patience_;
  std::vector<Method> methods_;
};

}  // namespace cohort::fuzzing
