#pragma once
// SchedulerForward: the task runtime's Scheduler service (/Scheduler/<Method>) at the pod's
// coordinator endpoint, each call passed on as it is to the coordinator with the job's
// credentials (TLS, token). The pod's task workers, drivers and object store reach the
// scheduler through it and need neither.

#include <memory>
#include <string>

#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

namespace cohort {

class SchedulerForward final : public grpc::CallbackGenericService {
 public:
  // `upstream`: the coordinator (MakeUpstreamChannel).
  explicit SchedulerForward(std::shared_ptr<grpc::Channel> upstream);

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override;

 private:
  class Call;
  grpc::GenericStub stub_;
};

}  // namespace cohort
