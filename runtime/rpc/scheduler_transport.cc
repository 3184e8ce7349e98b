#include "runtime/rpc/scheduler_transport.h"

#include <algorithm>
#include <atomic>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/rpc/task_messages.h"
#include "spdlog/spdlog.h"

namespace cohort::runtime {

namespace {

std::string Describe(const grpc::Status& status) {
  return absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())),
                      ": ", status.error_message());
}

bool MeansGone(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

const std::string& AddressOf(const Effect& effect) {
  return std::visit(
      [](const auto& e) -> const std::string& {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, DeliverEffect>) {
          return e.to_address;
        } else if constexpr (std::is_same_v<T, NotifyAliasEffect> ||
                             std::is_same_v<T, DeallocateEffect> ||
                             std::is_same_v<T, PlaceErrorEffect>) {
          return e.store_address;
        } else {
          return e.worker_address;
        }
      },
      effect);
}

}  // namespace

SchedulerTransport::SchedulerTransport(TaskScheduler* scheduler, TransportOptions options)
    : scheduler_(scheduler), options_(std::move(options)) {}

SchedulerTransport::~SchedulerTransport() { Stop(); }

void SchedulerTransport::Start() {
  dispatcher_ = std::thread([this] { DispatchLoop(); });
  prober_ = std::thread([this] { ProbeLoop(); });
}

void SchedulerTransport::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (dispatcher_.joinable()) dispatcher_.join();
  if (prober_.joinable()) prober_.join();
  absl::flat_hash_map<std::string, std::unique_ptr<Destination>> destinations;
  {
    absl::MutexLock lock(&mu_);
    destinations = std::move(destinations_);
  }
  for (auto& [address, d] : destinations) {
    {
      absl::MutexLock lock(&d->mu);
      d->stopping = true;
      if (d->current != nullptr) d->current->TryCancel();
    }
    if (d->thread.joinable()) d->thread.join();
  }
}

bool SchedulerTransport::Pause(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
  return !mu_.AwaitWithTimeout(absl::Condition(&stopping), d);
}

std::unique_ptr<grpc::ClientContext> SchedulerTransport::Context(absl::Duration timeout) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  // A connection not made yet, or one that failed once (a coordinator restarted from its
  // --state-dir sends its first calls on new channels), is waited for up to the deadline:
  // only a worker or store that stays unreachable is lost.
  ctx->set_wait_for_ready(true);
  if (!options_.auth_token.empty()) {
    ctx->AddMetadata("authorization", "Bearer " + options_.auth_token);
  }
  return ctx;
}

std::unique_ptr<grpc::ClientContext> SchedulerTransport::CallTo(Destination& d,
                                                                absl::Duration timeout) {
  std::unique_ptr<grpc::ClientContext> ctx = Context(timeout);
  absl::MutexLock lock(&d.mu);
  if (d.stopping) return nullptr;
  d.current = ctx.get();
  return ctx;
}

void SchedulerTransport::Done(Destination& d) {
  absl::MutexLock lock(&d.mu);
  d.current = nullptr;
}

SchedulerTransport::Destination& SchedulerTransport::DestinationFor(const std::string& address) {
  std::unique_ptr<Destination>& slot = destinations_[address];
  if (slot == nullptr) {
    slot = std::make_unique<Destination>();
    slot->address = address;
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    slot->channel = grpc::CreateCustomChannel(
        address, options_.credentials ? options_.credentials : grpc::InsecureChannelCredentials(),
        args);
    slot->store = ::ObjStore::NewStub(slot->channel);
    slot->worker = ::WorkerService::NewStub(slot->channel);
    Destination* d = slot.get();
    d->thread = std::thread([this, d] { Drain(d); });
  }
  return *slot;
}

void SchedulerTransport::DispatchLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    scheduler_->WaitForEffects(absl::Now() + absl::Milliseconds(200));
    std::vector<Effect> effects = scheduler_->TakeEffects();
    if (effects.empty()) continue;
    absl::MutexLock lock(&mu_);
    for (Effect& effect : effects) {
      Destination& d = DestinationFor(AddressOf(effect));
      absl::MutexLock queue_lock(&d.mu);
      d.queue.push_back(std::move(effect));
    }
  }
}

void SchedulerTransport::Drain(Destination* d) {
  while (true) {
    Effect effect;
    {
      absl::MutexLock lock(&d->mu);
      auto ready = [d]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(d->mu) {
        return d->stopping || !d->queue.empty();
      };
      d->mu.Await(absl::Condition(&ready));
      if (d->stopping) return;
      effect = std::move(d->queue.front());
      d->queue.pop_front();
    }
    Carry(*d, effect);
  }
}

void SchedulerTransport::Carry(Destination& d, const Effect& effect) {
  if (const auto* run = std::get_if<ExecuteTaskEffect>(&effect)) {
    v1::ExecuteTaskRequest request;
    v1::ExecuteTaskReply reply;
    absl::StatusOr<v1::Task> task = ToTaskMessage(run->task);
    if (!task.ok()) {
      scheduler_->WorkerLost(run->worker, std::string(task.status().message()));
      return;
    }
    *request.mutable_task() = *std::move(task);
    request.set_operation(run->operation);
    std::unique_ptr<grpc::ClientContext> ctx = CallTo(d, options_.call_timeout);
    if (ctx == nullptr) return;
    grpc::Status s = d.worker->ExecuteTask(ctx.get(), request, &reply);
    Done(d);
    if (!s.ok()) {
      spdlog::warn("worker {} at {} did not take task {} ({}): {}", run->worker, d.address,
                   run->operation, run->task.function_name, Describe(s));
      scheduler_->WorkerLost(run->worker, absl::StrCat("ExecuteTask failed: ", Describe(s)));
    }
  } else if (const auto* delivery = std::get_if<DeliverEffect>(&effect)) {
    if (delivery->attempt > 0) {
      absl::Duration wait = std::min(
          absl::Milliseconds(100) * (1 << std::min(delivery->attempt, 5)), absl::Seconds(2));
      if (!Pause(wait)) return;
    }
    v1::StartDeliveryRequest request;
    request.set_objstore_address(delivery->from_address);
    request.set_objectid(delivery->object);
    v1::AckReply reply;
    std::unique_ptr<grpc::ClientContext> ctx = CallTo(d, absl::Hours(1));
    if (ctx == nullptr) return;
    grpc::Status s = d.store->StartDelivery(ctx.get(), request, &reply);
    Done(d);
    if (!s.ok()) {
      spdlog::warn("delivery of object {} from {} to {} failed: {}", delivery->object,
                   delivery->from_address, d.address, Describe(s));
      scheduler_->DeliveryFailed(delivery->to, delivery->object, Describe(s));
    }
  } else if (const auto* alias = std::get_if<NotifyAliasEffect>(&effect)) {
    v1::NotifyAliasRequest request;
    request.set_alias_objectid(alias->alias);
    request.set_canonical_objectid(alias->canonical);
    v1::AckReply reply;
    grpc::Status s = d.store->NotifyAlias(Context(options_.call_timeout).get(), request, &reply);
    if (!s.ok()) spdlog::warn("NotifyAlias to {} failed: {}", d.address, Describe(s));
  } else if (const auto* freed = std::get_if<DeallocateEffect>(&effect)) {
    v1::DeallocateObjectRequest request;
    request.set_canonical_objectid(freed->canonical);
    v1::AckReply reply;
    grpc::Status s =
        d.store->DeallocateObject(Context(options_.call_timeout).get(), request, &reply);
    if (!s.ok() && !MeansGone(s)) {
      spdlog::warn("DeallocateObject {} at {} failed: {}", freed->canonical, d.address,
                   Describe(s));
    }
  } else if (const auto* error = std::get_if<PlaceErrorEffect>(&effect)) {
    v1::PutErrorRequest request;
    request.set_objectid(error->object);
    request.mutable_error()->set_message(error->message);
    request.mutable_error()->set_function_name(error->function_name);
    request.mutable_error()->set_operationid(error->operation);
    v1::AckReply reply;
    grpc::Status s = d.store->PutError(Context(options_.call_timeout).get(), request, &reply);
    if (!s.ok()) {
      if (!Pause(absl::Milliseconds(200))) return;
      scheduler_->DeliveryFailed(error->store, error->object, Describe(s));
    }
  } else if (const auto* import = std::get_if<ImportFunctionEffect>(&effect)) {
    v1::ImportFunctionRequest request;
    request.mutable_function()->set_implementation(import->implementation);
    v1::ImportFunctionReply reply;
    grpc::Status s =
        d.worker->ImportFunction(Context(options_.call_timeout).get(), request, &reply);
    if (!s.ok()) {
      scheduler_->WorkerLost(import->worker, absl::StrCat("ImportFunction failed: ", Describe(s)));
    }
  } else if (const auto* variable = std::get_if<ImportReusableVariableEffect>(&effect)) {
    v1::ImportReusableVariableRequest request;
    request.mutable_reusable_variable()->ParseFromString(variable->reusable_variable);
    v1::AckReply reply;
    grpc::Status s =
        d.worker->ImportReusableVariable(Context(options_.call_timeout).get(), request, &reply);
    if (!s.ok()) {
      scheduler_->WorkerLost(variable->worker,
                             absl::StrCat("ImportReusableVariable failed: ", Describe(s)));
    }
  } else if (std::holds_alternative<DieEffect>(effect)) {
    v1::DieRequest request;
    v1::DieReply reply;
    grpc::Status s = d.worker->Die(Context(options_.call_timeout).get(), request, &reply);
    if (!s.ok() && !MeansGone(s)) spdlog::warn("Die to {} failed: {}", d.address, Describe(s));
  }
}

void SchedulerTransport::ProbeLoop() {
  while (Pause(options_.probe_interval)) ProbeOnce();
}

void SchedulerTransport::ProbeOnce() {
  std::vector<LivenessTarget> targets = scheduler_->LivenessTargets();
  struct Probe {
    LivenessTarget target;
    std::unique_ptr<grpc::ClientContext> ctx;
    v1::ObjStoreInfoRequest store_request;
    v1::ObjStoreInfoReply store_reply;
    v1::AliveRequest worker_request;
    v1::AckReply worker_reply;
    bool alive = false;
  };
  std::vector<Probe> probes(targets.size());
  absl::Mutex done_mu;
  size_t pending = targets.size();
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    for (size_t i = 0; i < targets.size(); ++i) {
      Probe& p = probes[i];
      p.target = targets[i];
      p.ctx = Context(options_.probe_interval);
      Destination& d = DestinationFor(p.target.address);
      auto finished = [&p, &done_mu, &pending](const grpc::Status& s) {
        absl::MutexLock done(&done_mu);
        p.alive = !MeansGone(s);
        --pending;
      };
      if (p.target.is_store) {
        d.store->async()->ObjStoreInfo(p.ctx.get(), &p.store_request, &p.store_reply, finished);
      } else {
        d.worker->async()->Alive(p.ctx.get(), &p.worker_request, &p.worker_reply, finished);
      }
    }
  }
  {
    absl::MutexLock lock(&done_mu);
    auto all_done = [&pending]() { return pending == 0; };
    done_mu.Await(absl::Condition(&all_done));
  }
  for (const Probe& p : probes) {
    if (!p.alive) continue;
    if (p.target.is_store) {
      scheduler_->StoreSeen(p.target.id);
    } else {
      scheduler_->WorkerSeen(p.target.id);
    }
  }
  scheduler_->CheckLiveness();
}

}  // namespace cohort::runtime
